package bench

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
)

// observer consumes a namespace's FIRED and DONE streams with ordered consumers, as any
// subscriber could, and records every fire and completion with the moment the bench saw it.
type observer struct {
	expected map[string]time.Time
	stops    []func()

	mu        sync.Mutex
	fires     map[string]*fireObs  // by fireId
	byKey     map[string][]string  // (trigger, scheduled time) → distinct fireIds
	dones     map[string][]doneObs // JobCompleted by fireId
	failed    int                  // JobFailed
	completed map[string]bool      // expected keys with a JobCompleted
	all       chan struct{}        // closed once every expected key completed
	allAt     time.Time
	last      time.Time         // last message seen
	seq       map[string]uint64 // stream → last sequence consumed
	bad       int               // messages that did not decode
}

type fireObs struct {
	key       string
	node      string // instance id out of the event's source agate/<ns>/<id>
	scheduled time.Time
	fired     time.Time
}

type doneObs struct {
	key       string
	scheduled time.Time
	started   time.Time
	finished  time.Time
	seen      time.Time
}

// observe starts consuming the FIRED and DONE streams of ns from their first message.
func observe(ctx context.Context, js jetstream.JetStream, ns string, expected map[string]time.Time) (*observer, error) {
	o := &observer{expected: expected, fires: map[string]*fireObs{}, byKey: map[string][]string{},
		dones: map[string][]doneObs{}, completed: map[string]bool{}, all: make(chan struct{}), seq: map[string]uint64{}}
	for _, st := range []string{events.StreamFired(ns), events.StreamDone(ns)} {
		cons, err := js.OrderedConsumer(ctx, st, jetstream.OrderedConsumerConfig{})
		if err != nil {
			o.stop()
			return nil, fmt.Errorf("consuming stream %s: %w", st, err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { o.handle(st, m) })
		if err != nil {
			o.stop()
			return nil, fmt.Errorf("consuming stream %s: %w", st, err)
		}
		o.stops = append(o.stops, cc.Stop)
	}
	return o, nil
}

func (o *observer) stop() {
	for _, s := range o.stops {
		s()
	}
	o.stops = nil
}

func (o *observer) handle(stream string, m jetstream.Msg) {
	now := time.Now()
	md, err := m.Metadata()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last = now
	if err == nil {
		if md.Sequence.Stream <= o.seq[stream] {
			return // redelivered after a consumer reset
		}
		o.seq[stream] = md.Sequence.Stream
	}
	if strings.HasSuffix(stream, "_FIRED") {
		var f events.JobFired
		env, err := events.Decode(m.Data(), &f)
		if err != nil {
			o.bad++
			return
		}
		id := f.FireID.String()
		if _, ok := o.fires[id]; ok {
			return // the same fire published again (an outbox retry): not a second fire
		}
		key := fireKey(f.Trigger.Group, f.Trigger.Name, f.ScheduledTime)
		o.fires[id] = &fireObs{key: key, node: env.Source[strings.LastIndexByte(env.Source, '/')+1:],
			scheduled: f.ScheduledTime, fired: f.FiredTime}
		o.byKey[key] = append(o.byKey[key], id)
		return
	}
	var r events.JobResult
	env, err := events.Decode(m.Data(), &r)
	if err != nil {
		o.bad++
		return
	}
	if env.Type != events.TypeJobCompleted {
		o.failed++
		return
	}
	key := fireKey(r.Trigger.Group, r.Trigger.Name, r.ScheduledTime)
	id := r.FireID.String()
	o.dones[id] = append(o.dones[id], doneObs{key: key, scheduled: r.ScheduledTime, started: r.StartedTime,
		finished: r.FinishedTime, seen: now})
	if _, ok := o.expected[key]; ok && !o.completed[key] {
		o.completed[key] = true
		if len(o.completed) == len(o.expected) {
			o.allAt = now
			close(o.all)
		}
	}
}

// wait waits until every expected fire has a completion or the deadline passes, and returns
// when the last one was seen.
func (o *observer) wait(ctx context.Context, deadline time.Time, log *slog.Logger) (time.Time, bool) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case <-o.all:
			o.mu.Lock()
			defer o.mu.Unlock()
			return o.allAt, false
		case <-timer.C:
			return time.Now(), true
		case <-ctx.Done():
			return time.Now(), true
		case <-tick.C:
			o.mu.Lock()
			log.Info("workload: waiting for completions", "fired", len(o.fires), "completed", len(o.completed),
				"expected", len(o.expected))
			o.mu.Unlock()
		}
	}
}

// settle waits until the bench has consumed every message the two streams hold and none came for
// quiet, at most limit: duplicates published late are then counted.
func (o *observer) settle(ctx context.Context, js jetstream.JetStream, ns string, quiet, limit time.Duration) {
	end := time.Now().Add(limit)
	for time.Now().Before(end) && ctx.Err() == nil {
		caught := true
		for _, st := range []string{events.StreamFired(ns), events.StreamDone(ns)} {
			s, err := js.Stream(ctx, st)
			if err != nil {
				caught = false
				break
			}
			info, err := s.Info(ctx)
			o.mu.Lock()
			seen := o.seq[st]
			o.mu.Unlock()
			if err != nil || info.State.LastSeq > seen {
				caught = false
			}
		}
		o.mu.Lock()
		idle := time.Since(o.last)
		o.mu.Unlock()
		if caught && idle >= quiet {
			return
		}
		sleepUntil(ctx, time.Now().Add(100*time.Millisecond))
	}
}

// result computes the figures of the run from what was observed.
func (o *observer) result(s spec, t0 time.Time) Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := Result{System: "agate", Workload: s.name, Param: s.param, Nodes: s.nodes, Expected: len(o.expected),
		Demand: s.demand, Fired: len(o.fires), Failed: o.failed, Undecodable: o.bad, PerNode: map[string]int{}}
	var fireLate, startLate, e2eLate []time.Duration
	var firstFired, lastFired time.Time
	for _, f := range o.fires {
		r.PerNode[f.node]++
		fireLate = append(fireLate, f.fired.Sub(f.scheduled))
		if firstFired.IsZero() || f.fired.Before(firstFired) {
			firstFired = f.fired
		}
		if f.fired.After(lastFired) {
			lastFired = f.fired
		}
		if _, ok := o.expected[f.key]; !ok {
			r.Unexpected++
		}
	}
	for _, ids := range o.byKey {
		r.DuplicateFires += len(ids) - 1
	}
	var comps []doneObs
	for _, ds := range o.dones {
		r.Completions += len(ds)
		r.DuplicateCompletions += len(ds) - 1
		d := ds[0]
		comps = append(comps, d)
		startLate = append(startLate, d.started.Sub(d.scheduled))
		e2eLate = append(e2eLate, d.seen.Sub(d.scheduled))
	}
	r.Duplicates = r.DuplicateFires + r.DuplicateCompletions
	r.Completed = len(o.completed)
	r.Missing = len(o.expected) - r.Completed
	r.FireLate, r.StartLate, r.E2ELate = percentiles(fireLate), percentiles(startLate), percentiles(e2eLate)
	if r.Fired == 0 {
		return r
	}
	r.FirstFiredAfterT0Sec = firstFired.Sub(t0).Seconds()
	r.LastFiredAfterT0Sec = lastFired.Sub(t0).Seconds()
	if s.burst {
		r.FiresPerSec = float64(r.Fired) / lastFired.Sub(t0).Seconds()
	} else if d := lastFired.Sub(firstFired).Seconds(); d > 0 {
		r.FiresPerSec = float64(r.Fired) / d
	}
	if s.demand > 0 {
		win := max(time.Second, (s.lastDue() / 3).Truncate(time.Second))
		r.WindowSec = int(win / time.Second)
		r.Windows = windows(comps, t0, win)
		if len(r.Windows) >= 2 {
			first, last := r.Windows[0], r.Windows[len(r.Windows)-1]
			r.BacklogGrows = last.P99Ms > 2*first.P99Ms && last.P99Ms > 100
		}
		if r.FiresPerSec < 0.9*s.demand {
			r.BacklogGrows = true
		}
	}
	return r
}

// failover fills r.Failover: the fires due after the kill and how late they fired.
func (o *observer) failover(r *Result, killed, t0 time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := &Failover{Node: "n1", KilledAfterT0Sec: killed.Sub(t0).Seconds()}
	var worst time.Time
	for _, fo := range o.fires {
		if fo.scheduled.Before(killed) {
			if fo.node == "n1" {
				f.FiredByKilledBefore++
			}
			continue
		}
		late := fo.fired.Sub(fo.scheduled)
		if late > time.Second {
			f.LateOverOneSec++
		}
		if ms(late) > f.GapMs {
			f.GapMs, worst = ms(late), fo.fired
		}
		if fo.node == "n1" {
			f.FiredByKilledAfter++
		}
	}
	if !worst.IsZero() {
		f.RecoveredAfterKillSec = worst.Sub(killed).Seconds()
	}
	r.Failover = f
}

func windows(comps []doneObs, t0 time.Time, win time.Duration) []Window {
	by := map[int][]time.Duration{}
	step := int(win / time.Second)
	for _, c := range comps {
		w := int(c.scheduled.Sub(t0)/time.Second) / step * step
		by[w] = append(by[w], c.started.Sub(c.scheduled))
	}
	var out []Window
	for _, w := range slices.Sorted(maps.Keys(by)) {
		p := percentiles(by[w])
		out = append(out, Window{FromSec: w, Fires: len(by[w]), P50Ms: p.P50Ms, P99Ms: p.P99Ms})
	}
	return out
}
