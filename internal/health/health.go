// Package health is a process's readiness: named probes, each saying what it finds not ready, and
// the report the HTTP listener serves on /readyz (internal/httpserve). A scheduler node
// (internal/node) and a worker (internal/worker) each provide their probes; this package knows
// neither.
package health

import (
	"cmp"
	"context"
	"sync"
	"time"
	"unicode/utf8"
)

// Probe is one condition of readiness. Check returns nil when the condition holds, else an error
// that says what is not ready; it must return once ctx ends.
type Probe struct {
	Name  string
	Check func(ctx context.Context) error
}

// OK is the value of a probe that passed, in Report.Checks.
const OK = "ok"

// Report is the outcome of the probes, as /readyz serves it in JSON.
type Report struct {
	// Ready is true when every probe passed, and there was at least one: a process that has not
	// told what readiness means for it yet (it is starting) is not ready.
	Ready bool `json:"ready"`
	// Checks maps each probe's name to OK or to why it is not ready.
	Checks map[string]string `json:"checks"`
}

// maxReason bounds a probe's message in the report: driver errors can be long, and the report is
// meant to be read at a glance.
const maxReason = 200

// NotStarted is the reason Check gives, under the name "process", when it has no probes.
const NotStarted = "starting"

// Check runs the probes at once, each bounded by timeout, and reports. A probe that does not
// return within timeout is reported as timed out.
func Check(ctx context.Context, timeout time.Duration, probes []Probe) Report {
	r := Report{Ready: len(probes) > 0, Checks: make(map[string]string, max(len(probes), 1))}
	if len(probes) == 0 {
		r.Checks["process"] = NotStarted
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reasons := make([]string, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Go(func() {
			done := make(chan error, 1)
			go func() { done <- p.Check(ctx) }()
			select {
			case err := <-done:
				if err != nil {
					reasons[i] = cmp.Or(truncate(err.Error()), "failed")
				}
			case <-ctx.Done():
				// A probe that ignores its context must not hold the report; its goroutine ends
				// when the check does.
				reasons[i] = "no answer within " + timeout.String()
			}
		})
	}
	wg.Wait()
	for i, p := range probes {
		if reasons[i] == "" {
			r.Checks[p.Name] = OK
			continue
		}
		r.Ready = false
		r.Checks[p.Name] = reasons[i]
	}
	return r
}

func truncate(s string) string {
	if len(s) <= maxReason {
		return s
	}
	n := maxReason
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
