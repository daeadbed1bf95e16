package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// producer schedules the load through the public api subject, as a producer would: one
// schedule_job per job, retried with the same id until it is answered ok.
type producer struct {
	nc      *nats.Conn
	subject string
	rng     *rand.Rand
	log     *slog.Logger
	cfg     *Config

	mu        sync.Mutex
	plan      []PlannedTrigger
	sent      int
	confirmed int
	gaveUp    int
	wg        sync.WaitGroup
}

// Plan returns every trigger scheduled (or tried), with its fire times.
func (p *producer) Plan() []PlannedTrigger {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PlannedTrigger(nil), p.plan...)
}

type jobSpec struct {
	group, name, typ string
	nonconcurrent    bool
	data             map[string]any
	triggers         []trigSpec
}

type trigSpec struct {
	name     string
	startAt  time.Time
	interval time.Duration // 0: one-shot
	repeat   int
}

// run ticks once a second from t0 until loadEnd less the lead time, scheduling on each tick
// some repeating triggers, some one-shots spread over the time left, and now and then a
// non-concurrent job with several triggers; every fire time falls at or before loadEnd.
func (p *producer) run(ctx context.Context, t0, loadEnd time.Time) {
	defer p.wg.Wait()
	const lead = 1500 * time.Millisecond
	for tick := 0; ; tick++ {
		at := t0.Add(time.Duration(tick) * time.Second)
		if at.Add(lead + time.Second).After(loadEnd) {
			return
		}
		sleep(ctx, time.Until(at))
		if ctx.Err() != nil {
			return
		}
		start := time.Now().Add(lead).Truncate(time.Millisecond)
		left := loadEnd.Sub(start)

		rep := jobSpec{group: "rep", name: fmt.Sprintf("rep-%05d", tick), typ: "noop"}
		for i := range p.cfg.RepeatingPerSecond {
			interval := time.Duration(200+p.rng.IntN(301)) * time.Millisecond
			life := min(time.Duration(5000+p.rng.IntN(25001))*time.Millisecond, left)
			rep.triggers = append(rep.triggers, trigSpec{name: fmt.Sprintf("rep-%05d-%d", tick, i),
				startAt: start.Add(time.Duration(p.rng.IntN(500)) * time.Millisecond), interval: interval,
				repeat: max(0, int((life-500*time.Millisecond)/interval))})
		}
		one := jobSpec{group: "one", name: fmt.Sprintf("one-%05d", tick), typ: "noop"}
		for i := range p.cfg.OneShotsPerSecond {
			spread := min(20*time.Second, left)
			one.triggers = append(one.triggers, trigSpec{name: fmt.Sprintf("one-%05d-%d", tick, i),
				startAt: start.Add(time.Duration(p.rng.Int64N(int64(spread/time.Millisecond))) * time.Millisecond)})
		}
		jobs := []jobSpec{rep, one}
		if tick%p.cfg.NonconcurrentEvery == 0 && left > 5*time.Second {
			nc := jobSpec{group: "nc", name: fmt.Sprintf("nc-%05d", tick), typ: "sleep", nonconcurrent: true,
				data: map[string]any{"duration": "300ms"}}
			life := min(time.Duration(8000+p.rng.IntN(22001))*time.Millisecond, left-time.Second)
			for i := range 3 {
				interval := time.Duration(2000+p.rng.IntN(1001)) * time.Millisecond
				nc.triggers = append(nc.triggers, trigSpec{name: fmt.Sprintf("nc-%05d-%d", tick, i),
					startAt: start.Add(time.Duration(p.rng.IntN(1000)) * time.Millisecond), interval: interval,
					repeat: max(0, int((life-time.Second)/interval))})
			}
			jobs = append(jobs, nc)
		}
		for _, j := range jobs {
			p.send(ctx, fmt.Sprintf("chaos-%d-%s", p.cfg.Seed, j.name), j, loadEnd)
		}
	}
}

// send records the job's triggers in the plan and sends its command in the background.
func (p *producer) send(ctx context.Context, id string, j jobSpec, loadEnd time.Time) {
	job := map[string]any{"group": j.group, "name": j.name, "type": j.typ}
	if j.nonconcurrent {
		job["nonconcurrent"] = true
	}
	if j.data != nil {
		job["data"] = j.data
	}
	var trigs []any
	var planned []PlannedTrigger
	for _, t := range j.triggers {
		tr := map[string]any{"group": j.group, "name": t.name, "startAt": t.startAt.UTC().Format(time.RFC3339Nano)}
		times := []time.Time{t.startAt}
		if t.interval == 0 {
			tr["simple"] = map[string]any{"repeatCount": 0}
		} else {
			tr["simple"] = map[string]any{"interval": t.interval.String(), "repeatCount": t.repeat}
			for k := 1; k <= t.repeat; k++ {
				times = append(times, t.startAt.Add(time.Duration(k)*t.interval))
			}
		}
		if last := times[len(times)-1]; last.After(loadEnd) {
			panic(fmt.Sprintf("chaos: trigger %s fires at %s, after the window's end %s", t.name, last, loadEnd))
		}
		trigs = append(trigs, tr)
		planned = append(planned, PlannedTrigger{Key: j.group + "." + t.name, CommandID: id, Times: times})
	}
	body, err := json.Marshal(map[string]any{"id": id, "job": job, "triggers": trigs})
	if err != nil {
		panic(err)
	}
	p.mu.Lock()
	first := len(p.plan)
	p.plan = append(p.plan, planned...)
	p.sent++
	p.mu.Unlock()
	p.wg.Go(func() {
		ok := p.request(ctx, id, body, loadEnd.Add(p.cfg.CommandGrace))
		p.mu.Lock()
		defer p.mu.Unlock()
		if ok {
			p.confirmed++
			for i := first; i < first+len(planned); i++ {
				p.plan[i].Accepted = true
			}
		} else {
			p.gaveUp++
		}
	})
}

// request sends body until a reply says ok (a transient failure or no reply: again, same id),
// a final rejection, or the deadline.
func (p *producer) request(ctx context.Context, id string, body []byte, deadline time.Time) bool {
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := p.nc.RequestWithContext(rctx, p.subject, body)
		cancel()
		if err == nil {
			var out struct {
				OK    bool `json:"ok"`
				Error *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if jerr := json.Unmarshal(msg.Data, &out); jerr != nil {
				err = fmt.Errorf("reply is not an outcome: %w", jerr)
			} else if out.OK {
				return true
			} else if out.Error != nil && out.Error.Code != "unavailable" && out.Error.Code != "internal" {
				p.log.Error("chaos: command rejected", "id", id, "code", out.Error.Code, "message", out.Error.Message)
				return false
			} else {
				err = errors.New("transient outcome")
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			p.log.Warn("chaos: command not confirmed", "id", id, "attempts", attempt, "error", err)
			return false
		}
		if attempt%20 == 0 {
			p.log.Info("chaos: command still unanswered", "id", id, "attempts", attempt, "error", err)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}
