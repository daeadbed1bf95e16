package bench

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
)

// observer reads a namespace's FIRED and DONE streams, as any subscriber could, and records
// every fire and completion with the moment JetStream stored it. It reads them after the fact
// (the streams keep every message for days): while the workload runs it only polls the DONE
// stream's message count, as River's harness polls its completed count, so that watching costs
// the machine it measures next to nothing.
type observer struct {
	js       jetstream.JetStream
	ns       string
	expected map[string]time.Time

	mu        sync.Mutex
	fires     map[string]*fireObs  // by fireId
	byKey     map[string][]string  // (trigger, scheduled time) → distinct fireIds
	dones     map[string][]doneObs // JobCompleted by fireId
	failed    int                  // JobFailed
	completed map[string]bool      // expected keys with a JobCompleted
	allAt     time.Time            // when the last expected key's first completion was stored
	seq       map[string]uint64    // stream → last sequence read
	bad       int                  // messages that did not decode
	appliedAt []time.Time          // when each JobDeleted was logged (readApplied)
	reads     int                  // times wait read the streams (only wait's goroutine)
	doneMsgs  int                  // messages read from the DONE stream
}

type fireObs struct {
	key       string
	node      string // instance id out of the event's source agate/<ns>/<id>
	scheduled time.Time
	fired     time.Time
	published time.Time // when JetStream stored the JobFired
}

type doneObs struct {
	key       string
	scheduled time.Time
	started   time.Time
	finished  time.Time
	stored    time.Time // when JetStream stored the JobCompleted
}

// pollEvery is how often the observer asks JetStream for the DONE stream's message count.
const pollEvery = 10 * time.Millisecond

// pollSlow is how often it asks before the last expected fire is due.
const pollSlow = 500 * time.Millisecond

// quietRead is how long the DONE stream's message count stands still before the observer reads
// the streams, when it holds fewer messages than fires are expected (workers batch outcomes).
// Reading at every pause of a poll read the streams in the middle of bursts, taking CPU from
// the fires; a burst's outcomes seldom pause this long. The last completion's store time, not
// when it was read, ends the run (e2e); the end-to-end part of the CPU figures ends right before
// the DONE stream's read that found every completion (reading), up to quietRead later than when
// it was stored.
const quietRead = 50 * time.Millisecond

// observe prepares the reading of the FIRED and DONE streams of ns.
func observe(js jetstream.JetStream, ns string, expected map[string]time.Time) *observer {
	return &observer{js: js, ns: ns, expected: expected, fires: map[string]*fireObs{}, byKey: map[string][]string{},
		dones: map[string][]doneObs{}, completed: map[string]bool{}, seq: map[string]uint64{}}
}

// streams are the two streams the observer reads.
func (o *observer) streams() []string {
	return []string{events.StreamFired(o.ns), events.StreamDone(o.ns)}
}

// lastSeqs is the last sequence number of each stream.
func (o *observer) lastSeqs(ctx context.Context) (map[string]uint64, error) {
	last := map[string]uint64{}
	for _, st := range o.streams() {
		s, err := o.js.Stream(ctx, st)
		if err != nil {
			return nil, fmt.Errorf("looking up stream %s: %w", st, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading stream %s: %w", st, err)
		}
		last[st] = info.State.LastSeq
	}
	return last, nil
}

// collect reads each stream from where it stopped up to the sequence last gives.
func (o *observer) collect(ctx context.Context, last map[string]uint64) error {
	return o.collectFrom(ctx, last, o.streams()...)
}

// collectFrom is collect for the streams named.
func (o *observer) collectFrom(ctx context.Context, last map[string]uint64, streams ...string) error {
	for _, st := range streams {
		o.mu.Lock()
		from := o.seq[st] + 1
		o.mu.Unlock()
		if last[st] < from {
			continue
		}
		cons, err := o.js.OrderedConsumer(ctx, st, jetstream.OrderedConsumerConfig{
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from})
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", st, err)
		}
		for o.seqOf(st) < last[st] {
			// No more than are there: a fetch waits for its batch to fill, 2 s when short.
			batch, err := cons.Fetch(int(min(1000, last[st]-o.seqOf(st))), jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return fmt.Errorf("reading stream %s: %w", st, err)
			}
			n := 0
			for m := range batch.Messages() {
				o.handle(st, m)
				n++
			}
			if err := batch.Error(); err != nil && n == 0 {
				return fmt.Errorf("reading stream %s at %d of %d: %w", st, o.seqOf(st), last[st], err)
			}
		}
	}
	return nil
}

func (o *observer) seqOf(stream string) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seq[stream]
}

func (o *observer) handle(stream string, m jetstream.Msg) {
	md, err := m.Metadata()
	o.mu.Lock()
	defer o.mu.Unlock()
	var stored time.Time
	if err == nil {
		if md.Sequence.Stream <= o.seq[stream] {
			return // delivered again after a consumer reset
		}
		o.seq[stream], stored = md.Sequence.Stream, md.Timestamp
	}
	if strings.HasSuffix(stream, "_FIRED") {
		bodies, err := events.Bodies(m.Headers(), m.Data()) // a transaction's fires may share a message
		if err != nil {
			o.bad++
			return
		}
		for _, b := range bodies {
			o.fired(b, stored)
		}
		return
	}
	o.doneMsgs++
	bodies, err := events.Bodies(m.Headers(), m.Data())
	if err != nil {
		o.bad++
		return
	}
	for _, b := range bodies {
		o.done(b, stored)
	}
}

// fired records one fire, body, that JetStream stored at stored.
func (o *observer) fired(body []byte, stored time.Time) {
	var f events.JobFired
	env, err := events.Decode(body, &f)
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
		scheduled: f.ScheduledTime, fired: f.FiredTime, published: stored}
	o.byKey[key] = append(o.byKey[key], id)
}

// done records one outcome, body, that JetStream stored at stored.
func (o *observer) done(body []byte, stored time.Time) {
	var r events.JobResult
	env, err := events.Decode(body, &r)
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
		finished: r.FinishedTime, stored: stored})
	if _, ok := o.expected[key]; ok && !o.completed[key] {
		o.completed[key] = true
		if stored.After(o.allAt) {
			o.allAt = stored
		}
	}
}

// complete reports whether every expected fire has a completion.
func (o *observer) complete() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.completed) == len(o.expected)
}

// wait polls the DONE stream's message count and reads that stream from where it stopped when
// the count reaches the fires expected or, from lastDue (when the last expected fire is due: no
// run is complete before), stands still for quietRead (workers batch outcomes, so a message
// may hold several). A steady flow's count pauses often: reading at each pause decoded its
// outcomes while it ran, 0.07 of a core taken from the flow being measured. Once every
// expected fire has a completion it reads the FIRED stream and returns when JetStream stored
// the last completion; or it gives up at the deadline. reading runs right before each read of
// the streams (and before counted at the deadline), and counted once, the run's end for CPU
// figures: when the count reaches the fires expected, before any read; otherwise once the DONE
// stream's read found every completion (it read only what was new), or at the deadline. The
// caller takes the CPU figures of the run as they were at the last reading: the bench's own
// decoding of the DONE stream (a few percent of a fire's CPU) is not the fires' cost.
func (o *observer) wait(ctx context.Context, lastDue, deadline time.Time, log *slog.Logger, reading, counted func()) (time.Time, bool, error) {
	once := sync.OnceFunc(counted)
	defer once()
	poll := time.NewTimer(pollEvery)
	defer poll.Stop()
	lastLog := time.Now()
	done, err := o.js.Stream(ctx, events.StreamDone(o.ns))
	if err != nil {
		return time.Time{}, false, fmt.Errorf("looking up stream %s: %w", events.StreamDone(o.ns), err)
	}
	var prev, read uint64 // the count at the last poll, and when the streams were last read
	var changed time.Time // when the count last changed
	for {
		// One small request per poll, as River's harness does one count(*).
		info, err := done.Info(ctx)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("reading stream %s: %w", events.StreamDone(o.ns), err)
		}
		doneMsgs := info.State.Msgs
		if doneMsgs != prev {
			prev, changed = doneMsgs, time.Now()
		}
		// A worker publishes the outcomes waiting together in one message: once as many
		// messages as fires are stored, or when their count has stood still for quietRead,
		// read what is new.
		quiet := doneMsgs > read && time.Since(changed) >= quietRead && !time.Now().Before(lastDue)
		if doneMsgs >= uint64(len(o.expected)) || quiet {
			reading()
			if doneMsgs >= uint64(len(o.expected)) {
				once()
			}
			read = doneMsgs
			o.reads++
			last, err := o.lastSeqs(ctx)
			if err != nil {
				return time.Time{}, false, err
			}
			// DONE first: whether every fire completed is read there, and counted runs
			// before the FIRED stream, the larger, is read.
			if err := o.collectFrom(ctx, last, events.StreamDone(o.ns)); err != nil {
				return time.Time{}, false, err
			}
			if o.complete() {
				once()
				if err := o.collectFrom(ctx, last, events.StreamFired(o.ns)); err != nil {
					return time.Time{}, false, err
				}
				o.mu.Lock()
				defer o.mu.Unlock()
				return o.allAt, false, nil
			}
		}
		if time.Since(lastLog) > 2*time.Second {
			lastLog = time.Now()
			log.Info("workload: waiting for completions", "done_messages", doneMsgs, "expected", len(o.expected))
		}
		// Before lastDue the count only feeds the progress log: polled twice a second, not
		// taking 0.05 of a core (a hundred requests a second) from the flow being measured.
		if until := time.Until(lastDue); until > pollEvery {
			poll.Reset(min(until, pollSlow))
		} else {
			poll.Reset(pollEvery)
		}
		select {
		case <-ctx.Done():
			return time.Now(), true, nil
		case <-poll.C:
		}
		if time.Now().After(deadline) {
			reading()
			once()
			last, err := o.lastSeqs(ctx)
			if err != nil {
				return time.Now(), true, err
			}
			return time.Now(), true, o.collect(ctx, last)
		}
	}
}

// settle waits until neither stream got a message for quiet (at most limit), then reads them
// to their end: duplicates published late are counted too.
func (o *observer) settle(ctx context.Context, quiet, limit time.Duration) error {
	end := time.Now().Add(limit)
	prev, err := o.lastSeqs(ctx)
	if err != nil {
		return err
	}
	still := time.Now()
	for time.Now().Before(end) && time.Since(still) < quiet && sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
		cur, err := o.lastSeqs(ctx)
		if err != nil {
			return err
		}
		if !maps.Equal(cur, prev) {
			prev, still = cur, time.Now()
		}
	}
	return o.collect(ctx, prev)
}

// result computes the figures of the run from what was observed.
func (o *observer) result(s spec, t0 time.Time) Result {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := Result{System: "agate", Workload: s.name, Param: s.param, Nodes: s.nodes, Expected: len(o.expected),
		Demand: s.demand, Fired: len(o.fires), Failed: o.failed, Undecodable: o.bad, DoneMessages: o.doneMsgs, PerNode: map[string]int{}}
	var fireLate, pubLate, startLate, e2eLate []time.Duration
	var firstFired, lastFired time.Time
	for _, f := range o.fires {
		r.PerNode[f.node]++
		fireLate = append(fireLate, f.fired.Sub(f.scheduled))
		pubLate = append(pubLate, f.published.Sub(f.scheduled))
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
		e2eLate = append(e2eLate, d.stored.Sub(d.scheduled))
	}
	r.Duplicates = r.DuplicateFires + r.DuplicateCompletions
	r.Completed = len(o.completed)
	r.Missing = len(o.expected) - r.Completed
	r.FireLate, r.PublishLate = percentiles(fireLate), percentiles(pubLate)
	r.StartLate, r.E2ELate = percentiles(startLate), percentiles(e2eLate)
	if r.Fired == 0 {
		return r
	}
	for _, at := range o.appliedAt {
		if at.Before(lastFired) {
			r.AppliedBeforeLastFire++
		}
	}
	if len(o.appliedAt) > 0 {
		r.FirstAppliedAfterT0Sec = slices.MinFunc(o.appliedAt, time.Time.Compare).Sub(t0).Seconds()
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
		r.BacklogGrows = backlogGrows(r.Windows, r.FiresPerSec, s.demand)
	}
	return r
}

// backlogGrows says whether a flow of demand fires/s fell behind: fewer than 90 % of them got
// through, or the last window's start lateness is more than twice the first's, at its median or
// its p99, and above 100 ms. The median counts too: a flow falling behind late in the run moves
// the last window's median further than its p99 (444 to 1,782 ms against 1,430 to 2,736 in a
// steady run of 2026-12-02 that fired 93 % of its demand, which the p99 alone called steady).
func backlogGrows(ws []Window, firesPerSec, demand float64) bool {
	if firesPerSec < 0.9*demand {
		return true
	}
	if len(ws) < 2 {
		return false
	}
	first, last := ws[0], ws[len(ws)-1]
	grew := func(a, b float64) bool { return b > 2*a && b > 100 }
	return grew(first.P99Ms, last.P99Ms) || grew(first.P50Ms, last.P50Ms)
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

// writeFires writes every fire observed to path as CSV, one row a fire: its scheduled time as
// an offset from t0, how late it was fired and stored on the FIRED stream (ms), and the node
// that fired it.
func (o *observer) writeFires(path string, t0 time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing the fires: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the fires: %w", err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"scheduled_after_t0_ms", "fire_late_ms", "published_late_ms", "node"})
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 3, 64) }
	for _, fo := range o.fires {
		_ = w.Write([]string{ms(fo.scheduled.Sub(t0)), ms(fo.fired.Sub(fo.scheduled)), ms(fo.published.Sub(fo.scheduled)), fo.node})
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("writing the fires: %w", err)
	}
	return nil
}

// readApplied reads when the schedulers applied the completions of the bench's one-shot
// triggers: the time of every JobDeleted on the EVENTS stream that no command logged (the
// completion step logs one as it deletes the non-durable job a finished one-shot leaves, in the
// transaction that applies the completion), as
// many messages of the job subject as the stream holds now. result counts those before the last
// fire: completions applied while fires are still being made compete with them for the machine
// (a burst's schedulers hold them back while fires are behind: complete.Config.Backlogged).
func (o *observer) readApplied(ctx context.Context) error {
	st, subject := events.StreamEvents(o.ns), events.Subjects(o.ns).Evt("job")
	s, err := o.js.Stream(ctx, st)
	if err != nil {
		return fmt.Errorf("looking up stream %s: %w", st, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", st, err)
	}
	want := info.State.Subjects[subject]
	cons, err := o.js.OrderedConsumer(ctx, st, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", st, err)
	}
	var at []time.Time
	for read := uint64(0); read < want; {
		batch, err := cons.Fetch(int(min(want-read, 1000)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", st, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			bodies, _ := events.Bodies(m.Headers(), m.Data()) // a completion transaction's share a message
			for _, body := range bodies {
				// Not a command's: the calibration of intake deletes its jobs with delete_job.
				var d struct {
					CommandID string `json:"commandId"`
				}
				if env, err := events.Decode(body, &d); err == nil && env.Type == events.TypeJobDeleted && d.CommandID == "" {
					at = append(at, env.Time)
				}
			}
		}
		if err := batch.Error(); err != nil && n == 0 {
			return fmt.Errorf("reading stream %s at %d of %d %s messages: %w", st, read, want, subject, err)
		}
		read += uint64(n)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.appliedAt = at
	return nil
}
