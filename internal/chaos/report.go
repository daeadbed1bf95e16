package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// maxListed is how many examples of a violation the report lists.
const maxListed = 10

// WriteReport writes the run's report as a readable table.
func WriteReport(w io.Writer, rep *Report) {
	cfg := rep.Config
	r := rep.Results
	fmt.Fprintf(w, "Agate chaos run, seed %d\n", cfg.Seed)
	replay := cfg.CommandLine
	if replay == "" {
		replay = cfg.Replay()
	}
	fmt.Fprintf(w, "replay: %s\n", replay)
	fmt.Fprintf(w, "cluster: %d schedulers (check-in %s, misfire threshold %s), %d workers (ack wait %s), nats-server, PostgreSQL %s (fsync on)\n",
		cfg.Schedulers, cfg.CheckinInterval, cfg.MisfireThreshold, cfg.Workers, cfg.WorkerAckWait, rep.PGVersion)
	drained := "quiet"
	if !rep.Drained {
		drained = "NOT quiet (timed out)"
	}
	fmt.Fprintf(w, "window: %s of load (faults over at +%s); drain %s, %s; commands sent %d, confirmed %d, given up %d\n",
		cfg.Duration, rep.Window.Round(time.Second), rep.DrainTook.Round(100*time.Millisecond), drained,
		rep.Commands.Sent, rep.Commands.Confirmed, rep.Commands.GaveUp)
	fmt.Fprintf(w, "faults: %d injected of %d planned: %s\n", len(rep.Faults), rep.Planned, faultCounts(rep.Faults))
	fmt.Fprintf(w, "logs: %s\n\n", rep.Dir)
	if r == nil {
		fmt.Fprintln(w, "no results: the run did not finish")
		return
	}

	row := func(name string, n int, status string) { fmt.Fprintf(w, "  %-56s %9d  %s\n", name, n, status) }
	must0 := func(n int) string {
		if n == 0 {
			return "ok"
		}
		return "FAIL"
	}
	row("fires due in the window", r.Due, "")
	row("fired", r.Fired, "")
	row("lost", len(r.Lost), must0(len(r.Lost)))
	row("two fires of one (trigger, scheduled time)", len(r.Doubles), must0(len(r.Doubles)))
	row("fires at a time outside the schedule", len(r.Unexpected), must0(len(r.Unexpected)))
	row("overlapping executions of a non-concurrent job", len(r.Overlaps), must0(len(r.Overlaps)))
	row("fires without a terminal event", len(r.NoTerminal), must0(len(r.NoTerminal)))
	row("accepted commands without TriggerScheduled", len(r.LostCommands), must0(len(r.LostCommands)))
	row("misfires", len(r.Misfires), must0(len(r.Misfires)))
	row("triggers in ERROR", len(r.TriggerErrs), must0(len(r.TriggerErrs)))
	row("executions of an unknown fireId", len(r.OrphanExecutions), must0(len(r.OrphanExecutions)))
	row("executions recorded", r.Executions, "")
	row("duplicate executions of one fireId", len(r.Duplicates), "allowed (at-least-once)")
	row("  of which overlap another fire of a non-concurrent job", r.DupOverlaps, "allowed (a duplicate)")
	lateness := func(what string, l []time.Duration) {
		if len(l) > 0 {
			fmt.Fprintf(w, "  %-56s %9d  p50 %s, p99 %s, max %s\n", what, len(l),
				l[len(l)/2].Round(time.Millisecond), l[len(l)*99/100].Round(time.Millisecond), l[len(l)-1].Round(time.Millisecond))
		}
	}
	lateness("lateness (JobFired time - scheduled time)", r.Lateness)
	lateness("  of non-concurrent jobs' fires (wait for the one before)", r.LatenessNonconcurrent)
	lateness("  of the others", r.LatenessOthers)

	if len(r.Duplicates) > 0 {
		fmt.Fprintln(w, "\nduplicate executions by the fault before them:")
		counts := map[string]int{}
		var order []string
		for _, d := range r.Duplicates {
			k := "(no fault before it)"
			if d.Fault != nil {
				k = d.Fault.String()
			}
			if counts[k] == 0 {
				order = append(order, k)
			}
			counts[k]++
		}
		for _, k := range order {
			fmt.Fprintf(w, "  %4d after %s\n", counts[k], k)
		}
	}

	bound := 2*cfg.CheckinInterval + checkinGrace
	fmt.Fprintf(w, "\nfailover (kill -9 or SIGSTOP of a scheduler -> first TriggerReleased \"node failed\" naming it)\n")
	fmt.Fprintf(w, "  check-in interval %s; a node is declared dead after 2 x %s + %s = %s of silence\n",
		cfg.CheckinInterval, cfg.CheckinInterval, checkinGrace, bound)
	var took []time.Duration
	var slowest Failover
	for _, f := range r.Failovers {
		if f.Released {
			took = append(took, f.After)
			if f.After > slowest.After {
				slowest = f
			}
		}
	}
	if len(took) == 0 {
		fmt.Fprintf(w, "  %d node deaths, none held claims to release\n", len(r.Failovers))
	} else {
		slices.Sort(took)
		fmt.Fprintf(w, "  %d node deaths, %d with claims released: p50 %s, max %s (%.1f and %.1f check-in intervals)\n",
			len(r.Failovers), len(took), took[len(took)/2].Round(10*time.Millisecond), took[len(took)-1].Round(10*time.Millisecond),
			float64(took[len(took)/2])/float64(cfg.CheckinInterval), float64(took[len(took)-1])/float64(cfg.CheckinInterval))
		fmt.Fprintf(w, "  slowest: %s\n", slowest.Fault)
	}

	fmt.Fprintf(w, "\nthe log replayed against the tables (scheduler replay)\n")
	for _, c := range rep.Replays {
		switch {
		case c.Err != nil:
			fmt.Fprintf(w, "  %-24s FAIL: %v\n", c.From, c.Err)
		default:
			from := ""
			if !c.Report.Snapshot.TakenAt.IsZero() {
				from = " after the snapshot of " + c.Report.Snapshot.TakenAt.UTC().Format(time.TimeOnly)
			}
			status := "equal"
			if !c.Report.Equal() {
				status = fmt.Sprintf("FAIL: %d differences", len(c.Report.Differences))
			}
			fmt.Fprintf(w, "  %-24s %d events%s: %s\n", c.From, c.Report.Events, from, status)
			for i, d := range c.Report.Differences {
				if i == maxListed {
					fmt.Fprintf(w, "    … %d more\n", len(c.Report.Differences)-maxListed)
					break
				}
				fmt.Fprintf(w, "    %s\n", d)
			}
		}
	}

	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s (%d):\n", title, len(items))
		for i, s := range items {
			if i == maxListed {
				fmt.Fprintf(w, "  … %d more\n", len(items)-maxListed)
				break
			}
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	keys := func(ks []FireKey) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.String())
		}
		return out
	}
	list("LOST fires (trigger@scheduled time, UTC)", keys(r.Lost))
	list("DOUBLE fires", keys(r.Doubles))
	list("fires at UNEXPECTED times", keys(r.Unexpected))
	list("OVERLAPPING executions", r.Overlaps)
	list("fires WITHOUT a terminal event (fireId)", r.NoTerminal)
	list("accepted commands LOST", r.LostCommands)
	list("MISFIRES", r.Misfires)
	list("triggers in ERROR", r.TriggerErrs)
	list("processes that EXITED on their own", rep.Unexpected)

	fmt.Fprintln(w, "\nfault log (offset from the start of the window):")
	for _, f := range rep.Faults {
		fmt.Fprintf(w, "  %s\n", f)
	}
	if v := rep.Violations(); len(v) > 0 {
		fmt.Fprintf(w, "\nFAILED: %s\nseed %d; logs in %s\n", strings.Join(v, ", "), cfg.Seed, rep.Dir)
	} else {
		fmt.Fprintf(w, "\nPASSED: every invariant holds (seed %d)\n", cfg.Seed)
	}
}

func faultCounts(fs []FaultRecord) string {
	counts := map[string]int{}
	var order []string
	for _, f := range fs {
		k := string(f.Kind)
		if f.Kind == FaultKill || f.Kind == FaultTerm || f.Kind == FaultStop {
			k += " " + f.Role
		}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	slices.Sort(order)
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}
