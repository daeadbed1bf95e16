package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/events"
)

// spec describes one workload run: triggers trigger i of which starts at T0+offset(i) and fires
// fires times, interval apart.
type spec struct {
	name     string // burst | steady | failover
	nodes    int
	triggers int
	fires    int
	interval time.Duration
	offset   func(i int) time.Duration
	// burst: every fire is due at T0; fires/s is measured from T0 rather than from the first fire.
	burst bool
	// param describes the size, e.g. "N=20000 at T0".
	param string
	// demand is the fires/s the schedule asks for (steady, failover), 0 otherwise.
	demand float64
	// killAfter (failover): scheduler n1 gets SIGKILL this long after T0.
	killAfter time.Duration
}

// lastDue is the offset of the last expected fire from T0.
func (s spec) lastDue() time.Duration {
	return s.offset(s.triggers-1) + time.Duration(s.fires-1)*s.interval
}

// commands is how many schedule_job commands the workload sends.
func (s spec) commands(perCommand int) int { return (s.triggers + perCommand - 1) / perCommand }

// fireKey identifies one scheduled fire of one trigger.
func fireKey(group, name string, at time.Time) string {
	return fmt.Sprintf("%s.%s@%d", group, name, at.UnixMicro())
}

// plan returns the schedule_job bodies for T0, perCommand triggers each (one job per command),
// and the expected fires keyed by fireKey.
func (s spec) plan(prefix string, t0 time.Time, perCommand int) ([][]byte, map[string]time.Time, error) {
	expected := make(map[string]time.Time, s.triggers*s.fires)
	var cmds [][]byte
	for c := 0; c*perCommand < s.triggers; c++ {
		var trigs []any
		for i := c * perCommand; i < min(s.triggers, (c+1)*perCommand); i++ {
			at := t0.Add(s.offset(i))
			name := fmt.Sprintf("t%06d", i)
			simple := map[string]any{"repeatCount": s.fires - 1}
			if s.fires > 1 {
				simple["interval"] = s.interval.String()
			}
			trigs = append(trigs, map[string]any{"group": prefix, "name": name,
				"startAt": at.UTC().Format(time.RFC3339Nano), "simple": simple})
			for k := range s.fires {
				f := at.Add(time.Duration(k) * s.interval)
				expected[fireKey(prefix, name, f)] = f
			}
		}
		body, err := json.Marshal(map[string]any{"id": fmt.Sprintf("%s-c%06d", prefix, c),
			"job": map[string]any{"group": prefix, "name": fmt.Sprintf("j%06d", c), "type": "noop"}, "triggers": trigs})
		if err != nil {
			return nil, nil, fmt.Errorf("encoding command: %w", err)
		}
		cmds = append(cmds, body)
	}
	return cmds, expected, nil
}

// burstSpec is Quartz's W1: n one-shot triggers all due at T0.
func burstSpec(n, nodes int) spec {
	return spec{name: "burst", nodes: nodes, triggers: n, fires: 1, burst: true,
		offset: func(int) time.Duration { return 0 }, param: fmt.Sprintf("N=%d at T0", n)}
}

// steadySpec is Quartz's W2: rate triggers every 1 s for d, start times spread over 1 s.
func steadySpec(rate int, d time.Duration, nodes int) spec {
	fires := int(d / time.Second)
	return spec{name: "steady", nodes: nodes, triggers: rate, fires: fires, interval: time.Second,
		// Trigger times have millisecond resolution (as Quartz's), so start times are spread on
		// the millisecond grid: above 1,000/s several triggers share a millisecond.
		offset: func(i int) time.Duration { return time.Duration(i*1000/rate) * time.Millisecond },
		param:  fmt.Sprintf("%d×1s for %ds", rate, fires), demand: float64(rate)}
}

// failoverSpec is steady with scheduler n1 killed (SIGKILL) after a third of the run.
func failoverSpec(rate int, d time.Duration, nodes int) spec {
	s := steadySpec(rate, d, nodes)
	s.name = "failover"
	s.killAfter = (d / 3).Truncate(time.Second)
	s.param += fmt.Sprintf(", n1 killed at T0+%s", s.killAfter)
	return s
}

// bench runs workloads on the shared infrastructure.
type bench struct {
	o     Config
	inf   *infra
	log   *slog.Logger
	seq   int
	round int // the round running, from 1
}

// runWorkload runs one workload in a fresh database and namespace, with its own scheduler and
// worker processes, and measures it from the FIRED and DONE streams.
func (b *bench) runWorkload(ctx context.Context, s spec) (Result, error) {
	ctx, cancel := context.WithCancel(ctx) // ends the failover's killer with the run
	defer cancel()
	b.seq++
	dbName := fmt.Sprintf("agatebench_%d_%s_%dn", b.seq, s.name, s.nodes)
	ns := fmt.Sprintf("bench-%s-%dn-%d-%d", s.name, s.nodes, b.seq, time.Now().Unix()%100000)
	log := b.log.With("workload", s.name, "nodes", s.nodes)
	log.Info("workload: preparing", "database", dbName, "namespace", ns, "size", s.param)
	dbURL, err := b.inf.createDB(ctx, dbName, b.o.PGSet)
	if err != nil {
		return Result{}, err
	}
	defer b.inf.dropDB(ctx, dbName, log)
	if err := b.migrate(ctx, dbURL); err != nil {
		return Result{}, err
	}
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return Result{}, fmt.Errorf("connecting to %s: %w", dbName, err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	analyzedAtStart, err := analyzeCounts(ctx, admin)
	if err != nil {
		return Result{}, err
	}

	nc, err := nats.Connect(b.inf.natsURL, nats.Name("agatebench-producer"))
	if err != nil {
		return Result{}, fmt.Errorf("connecting to NATS at %s: %w", b.inf.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, fmt.Errorf("opening JetStream: %w", err)
	}
	defer deleteStreams(js, ns, log)

	cl := &cluster{ns: ns}
	defer cl.stop()
	if err := b.startSchedulers(cl, dbURL, s.nodes); err != nil {
		return Result{}, err
	}
	if err := waitNodes(ctx, nc, dbURL, ns, s.nodes); err != nil {
		return Result{}, fmt.Errorf("%w (logs in %s)", err, b.inf.dir)
	}
	if err := b.startWorkers(cl, b.o.Workers); err != nil {
		return Result{}, err
	}
	if err := waitWorkers(ctx, js, ns, b.o.Workers); err != nil {
		return Result{}, fmt.Errorf("%w (logs in %s)", err, b.inf.dir)
	}
	log.Info("workload: scheduler and worker processes running", "workers", b.o.Workers,
		"concurrency", b.o.Concurrency, "logs", b.inf.dir)

	perCmd := b.o.TriggersPerCommand
	lead := b.o.Lead
	if lead == 0 {
		if lead, err = b.calibrateLead(ctx, nc, ns, s); err != nil {
			return Result{}, err
		}
		log.Info("workload: lead time chosen from calibration commands", "lead", lead.Round(time.Millisecond))
	}
	schedStart := time.Now()
	t0 := schedStart.Add(lead).Truncate(time.Millisecond)
	cmds, expected, err := s.plan("b", t0, perCmd)
	if err != nil {
		return Result{}, err
	}
	obs := observe(js, ns, expected)
	log.Info("workload: scheduling", "commands", len(cmds), "triggers_per_command", perCmd,
		"fires_expected", len(expected), "t0_in", time.Until(t0).Round(time.Millisecond))
	if err := schedule(ctx, nc, ns, cmds, b.o.InFlight, log); err != nil {
		return Result{}, err
	}
	schedEnd := time.Now()
	log.Info("workload: scheduled", "took", schedEnd.Sub(schedStart).Round(time.Millisecond),
		"before_t0", t0.Sub(schedEnd).Round(time.Millisecond))
	if schedEnd.After(t0) {
		log.Warn("scheduling finished after T0: the first fires are late because of it and the figures understate Agate; raise --lead")
	}

	b.inf.flushWrites(ctx, log)
	if time.Now().After(t0) {
		log.Warn("flushing the set-up's writes (CHECKPOINT, sync) ended after T0; raise --lead")
	}

	// Counters from here: statistics reset and CPU read right before T0 (or now, when late),
	// before the first claims (fire-ahead 200 ms), not while the bench waits for T0.
	sleepUntil(ctx, t0.Add(-500*time.Millisecond))
	if err := b.resetStatements(ctx, admin); err != nil {
		return Result{}, err
	}
	dbBefore, err := readDBStats(ctx, admin)
	if err != nil {
		return Result{}, err
	}
	analyzedAtT0, err := analyzeCounts(ctx, admin)
	if err != nil {
		return Result{}, err
	}
	pids := b.pids(cl)
	cpuBefore := cpuSeconds(pids)
	// The machine's CPUs from T0: whether the cores were the limit (Result.Machine).
	ticksAtT0 := make(chan cpuTicks, 1) // the zero cpuTicks when ctx ended first
	go func() {
		var t cpuTicks
		if sleepUntil(ctx, t0) {
			t = readCPUTicks()
		}
		ticksAtT0 <- t
	}()
	profiles := func() []string { return nil }
	if len(cl.pprof) > 0 {
		sleepUntil(ctx, t0)
		profiles = b.profile(ctx, cl.pprof, fmt.Sprintf("%s-%dn", s.name, s.nodes))
	}

	var killed atomic.Int64 // unix nanoseconds of the SIGKILL
	if s.killAfter > 0 {
		victim := cl.schedulers[0]
		go func() {
			if !sleepUntil(ctx, t0.Add(s.killAfter)) {
				return
			}
			if err := victim.kill(); err != nil {
				log.Warn("failover: SIGKILL failed", "error", err)
				return
			}
			killed.Store(time.Now().UnixNano())
			log.Info("failover: scheduler killed (SIGKILL)", "node", victim.name)
		}()
	}

	deadline := t0.Add(s.lastDue() + b.o.Timeout)
	var cpuAfter, cpuCompleted map[string]float64
	var completedAt, countedAt, appliedAt time.Time
	var ticksCompleted cpuTicks
	allSeen, timedOut, err := obs.wait(ctx, t0.Add(s.lastDue()), deadline, log, func() {
		cpuCompleted, completedAt = cpuSeconds(pids), time.Now() // before the read: it may find the run complete
		ticksCompleted = readCPUTicks()
	}, func() {
		// The schedulers may apply completions after the workers published them (a node yields
		// to its fires while it has a backlog): a fire's CPU runs until they have.
		appliedAt = waitApplied(ctx, js, ns, deadline)
		cpuAfter, countedAt = cpuSeconds(pids), time.Now()
	})
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if err != nil {
		return Result{}, err
	}
	if timedOut {
		log.Warn("workload: timed out waiting for completions", "timeout", b.o.Timeout)
	} else {
		log.Info("workload: every expected fire completed", "after_t0", allSeen.Sub(t0).Round(time.Millisecond), "reads", obs.reads)
	}
	// Late duplicates, and PostgreSQL's statistics (a backend reports them within a second of
	// going idle), have until the streams are quiet.
	if err := obs.settle(ctx, time.Second, 10*time.Second); err != nil {
		return Result{}, err
	}
	dbAfter, err := readDBStats(ctx, admin)
	if err != nil {
		return Result{}, err
	}
	analyzedAtEnd, err := analyzeCounts(ctx, admin)
	if err != nil {
		return Result{}, err
	}

	if s.burst {
		if err := obs.readApplied(ctx); err != nil {
			return Result{}, err
		}
	}
	r := obs.result(s, t0)
	r.Workers, r.Concurrency, r.TriggersPerCommand = b.o.Workers, b.o.Concurrency, perCmd
	r.LeadSec = lead.Seconds()
	r.SchedulingSec = schedEnd.Sub(schedStart).Seconds()
	r.ScheduledBeforeT0Sec = t0.Sub(schedEnd).Seconds()
	r.TimedOut = timedOut
	r.AnalyzedBeforeT0 = analyzedBetween(analyzedAtStart, analyzedAtT0)
	r.AnalyzedDuring = analyzedBetween(analyzedAtT0, analyzedAtEnd)
	if !timedOut && r.Completions > 0 {
		r.AllCompletedAfterT0Sec = allSeen.Sub(t0).Seconds()
		r.E2EPerSec = float64(len(expected)) / allSeen.Sub(t0).Seconds()
	}
	if !appliedAt.IsZero() {
		r.AppliedAfterT0Sec = appliedAt.Sub(t0).Seconds()
	}
	if r.Fired > 0 {
		r.CommitsPerFire = float64(dbAfter.commits-dbBefore.commits) / float64(r.Fired)
		r.WritesPerFire = float64(dbAfter.writes-dbBefore.writes) / float64(r.Fired)
	}
	if r.Statements, err = b.topStatements(ctx, admin, r.Fired); err != nil {
		return Result{}, err
	}
	r.CPU = cpuDelta(cpuBefore, cpuAfter)
	r.CPUToCompleted = cpuDelta(cpuBefore, cpuCompleted)
	r.MeasuredToCompletedSec = completedAt.Sub(dbBefore.at).Seconds()
	r.MeasuredSec = countedAt.Sub(dbBefore.at).Seconds() // the CPU figures' interval
	r.Machine = machineBetween(<-ticksAtT0, ticksCompleted, completedAt.Sub(t0).Seconds())
	if at := killed.Load(); at > 0 {
		obs.failover(&r, time.Unix(0, at), t0)
	}
	r.Profiles = profiles()
	if b.o.FiresOut != "" {
		path := filepath.Join(b.o.FiresOut, fmt.Sprintf("%s-%dn-round%d.csv", s.name, s.nodes, max(b.round, 1)))
		if err := obs.writeFires(path, t0); err != nil {
			return Result{}, err
		}
		r.FiresFile = path
	}
	log.Info("workload: done", "fires_per_sec", round1(r.FiresPerSec), "e2e_per_sec", round1(r.E2EPerSec),
		"fire_late_p99_ms", round1(r.FireLate.P99Ms), "start_late_p99_ms", round1(r.StartLate.P99Ms),
		"dup", r.Duplicates, "missing", r.Missing)
	return r, nil
}

// sleepUntil waits until t or ctx's end; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// deleteStreams deletes a namespace's streams once its workload is measured, to free the store.
func deleteStreams(js jetstream.JetStream, ns string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, st := range []string{events.StreamCommands(ns), events.StreamFired(ns), events.StreamDone(ns), events.StreamEvents(ns)} {
		// What the workload stored: nats-server's cost grows with the bytes it stores.
		if s, err := js.Stream(ctx, st); err == nil && s.CachedInfo().State.Msgs > 0 {
			state := s.CachedInfo().State
			log.Info("workload: stream stored", "stream", st, "messages", state.Msgs, "bytes", state.Bytes,
				"bytes_per_message", state.Bytes/state.Msgs)
		}
		if err := js.DeleteStream(ctx, st); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			log.Warn("deleting stream failed", "stream", st, "error", err)
		}
	}
}

// calibrateLead sends commands like the workload's (their triggers due in a day): a first round
// (up to --in-flight) to warm the nodes' connections and caches, then up to twice as many, timed. It deletes
// their jobs and returns a lead long enough to send the workload's commands before T0: 3 s +
// 3 × the time they take at the timed rate (the rate falls as the tables grow, and a checkpoint
// during scheduling slows it further: 1.5 × let 20,000 commands run past T0 in one run of three).
func (b *bench) calibrateLead(ctx context.Context, nc *nats.Conn, ns string, s spec) (time.Duration, error) {
	// Small next to the workload: the calibration's rows, deleted, stay behind as dead tuples.
	n := s.commands(b.o.TriggersPerCommand)
	warm, timed := max(1, min(b.o.InFlight, n/20)), max(1, min(2*b.o.InFlight, n/10))
	cal := spec{triggers: (warm + timed) * b.o.TriggersPerCommand, fires: 1, offset: func(int) time.Duration { return 0 }}
	cmds, _, err := cal.plan("calib", time.Now().Add(24*time.Hour).Truncate(time.Millisecond), b.o.TriggersPerCommand)
	if err != nil {
		return 0, err
	}
	if err := schedule(ctx, nc, ns, cmds[:warm], b.o.InFlight, b.log); err != nil {
		return 0, fmt.Errorf("calibration: %w", err)
	}
	start := time.Now()
	if err := schedule(ctx, nc, ns, cmds[warm:], b.o.InFlight, b.log); err != nil {
		return 0, fmt.Errorf("calibration: %w", err)
	}
	per := time.Since(start) / time.Duration(len(cmds)-warm)
	dels := make([][]byte, len(cmds))
	for c := range cmds {
		dels[c] = fmt.Appendf(nil, `{"id":"calib-del-%d","job":{"group":"calib","name":"j%06d"}}`, c, c)
	}
	if err := sendAll(ctx, nc, events.Subjects(ns).API("delete_job"), dels, b.o.InFlight, b.log); err != nil {
		return 0, fmt.Errorf("calibration: deleting its jobs: %w", err)
	}
	return 3*time.Second + time.Duration(3*float64(s.commands(b.o.TriggersPerCommand))*float64(per)), nil
}

// schedule sends the schedule_job commands over the api subject, inFlight requests at once, as
// a producer does.
func schedule(ctx context.Context, nc *nats.Conn, ns string, cmds [][]byte, inFlight int, log *slog.Logger) error {
	return sendAll(ctx, nc, events.Subjects(ns).API("schedule_job"), cmds, inFlight, log)
}

// sendAll sends each body as a request on subject, inFlight at once, and fails on the first
// rejection.
func sendAll(ctx context.Context, nc *nats.Conn, subject string, bodies [][]byte, inFlight int, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next, sent atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range min(inFlight, len(bodies)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				if err := request(ctx, nc, subject, bodies[i]); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				sent.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	start := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			if firstErr == nil && ctx.Err() != nil {
				return ctx.Err()
			}
			return firstErr
		case <-tick.C:
			log.Info("workload: sending commands", "subject", subject, "answered", sent.Load(), "of", len(bodies),
				"elapsed", time.Since(start).Round(time.Millisecond))
		}
	}
}

// request sends one command and waits for its outcome, retrying while no node answers yet or
// the outcome says a retry may succeed.
func request(ctx context.Context, nc *nats.Conn, subject string, body []byte) error {
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		msg, err := nc.RequestWithContext(rctx, subject, body)
		cancel()
		if errors.Is(err, nats.ErrNoResponders) && attempt < 100 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("%s: %w", subject, err)
		}
		var out command.Outcome
		if err := json.Unmarshal(msg.Data, &out); err != nil {
			return fmt.Errorf("%s: the reply is not an outcome: %w", subject, err)
		}
		if !out.OK {
			if out.Transient() && attempt < 10 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return fmt.Errorf("%s rejected: %+v", subject, out.Error)
		}
		return nil
	}
}
