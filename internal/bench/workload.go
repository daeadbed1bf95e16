package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/worker"
)

// maxTriggersPerCommand is schedule_job's maxItems for triggers.
const maxTriggersPerCommand = 100

// spec describes one workload run.
type spec struct {
	name  string // accept | burst | steady
	nodes int
	// plan returns the schedule_job bodies for T0 and the expected fires, keyed by fireKey.
	plan func(t0 time.Time) ([]map[string]any, map[string]time.Time)
	// commands is how many schedule_job commands plan returns (to choose T0 before planning).
	commands int
	// lastDue is the offset of the last expected fire from T0.
	lastDue time.Duration
	// burst: all fires are due at T0; fires/s is measured from T0 rather than from the first start.
	burst bool
	// param describes the size, e.g. "N=20000".
	param string
	// demand is the fires/s the schedule asks for (steady), 0 when not steady.
	demand float64
}

// fireKey identifies one scheduled fire of one trigger.
func fireKey(group, name string, at time.Time) string {
	return fmt.Sprintf("%s.%s@%d", group, name, at.UnixMicro())
}

func oneShot(group, name string, at time.Time) map[string]any {
	return map[string]any{"group": group, "name": name, "startAt": at.UTC().Format(time.RFC3339Nano),
		"simple": map[string]any{"repeatCount": 0}}
}

func repeating(group, name string, at time.Time, interval time.Duration, repeat int) map[string]any {
	return map[string]any{"group": group, "name": name, "startAt": at.UTC().Format(time.RFC3339Nano),
		"simple": map[string]any{"interval": interval.String(), "repeatCount": repeat}}
}

func scheduleJob(id, group, name string, triggers []any) map[string]any {
	return map[string]any{"id": id, "job": map[string]any{"group": group, "name": name, "type": "noop"},
		"triggers": triggers}
}

// oneShots plans n one-shot triggers, the i-th due at t0+offset(i), 100 per command.
func oneShots(prefix string, n int, t0 time.Time, offset func(i int) time.Duration,
	cmds []map[string]any, expected map[string]time.Time) []map[string]any {
	for c := 0; c*maxTriggersPerCommand < n; c++ {
		var trigs []any
		for i := c * maxTriggersPerCommand; i < min(n, (c+1)*maxTriggersPerCommand); i++ {
			at := t0.Add(offset(i))
			name := fmt.Sprintf("%s-%06d", prefix, i)
			trigs = append(trigs, oneShot(prefix, name, at))
			expected[fireKey(prefix, name, at)] = at
		}
		cmds = append(cmds, scheduleJob(fmt.Sprintf("%s-cmd-%d", prefix, c), prefix, fmt.Sprintf("%s-job-%04d", prefix, c), trigs))
	}
	return cmds
}

// repeaters plans n triggers repeating every interval, fires times each, the i-th starting at
// t0+start(i), 100 per command.
func repeaters(prefix string, n, fires int, interval time.Duration, t0 time.Time, start func(i int) time.Duration,
	cmds []map[string]any, expected map[string]time.Time) []map[string]any {
	for c := 0; c*maxTriggersPerCommand < n; c++ {
		var trigs []any
		for i := c * maxTriggersPerCommand; i < min(n, (c+1)*maxTriggersPerCommand); i++ {
			at := t0.Add(start(i))
			name := fmt.Sprintf("%s-%06d", prefix, i)
			trigs = append(trigs, repeating(prefix, name, at, interval, fires-1))
			for k := range fires {
				f := at.Add(time.Duration(k) * interval)
				expected[fireKey(prefix, name, f)] = f
			}
		}
		cmds = append(cmds, scheduleJob(fmt.Sprintf("%s-cmd-%d", prefix, c), prefix, fmt.Sprintf("%s-job-%04d", prefix, c), trigs))
	}
	return cmds
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// acceptSpec is the two-node acceptance workload.
func acceptSpec(nodes int) spec {
	return spec{
		name: "accept", nodes: nodes, commands: ceilDiv(1000, maxTriggersPerCommand) + 1,
		lastDue: 24 * 200 * time.Millisecond, param: "1000 one-shot/2s + 20×25 every 200ms",
		plan: func(t0 time.Time) ([]map[string]any, map[string]time.Time) {
			exp := map[string]time.Time{}
			cmds := oneShots("once", 1000, t0, func(i int) time.Duration { return time.Duration(i) * 2 * time.Millisecond }, nil, exp)
			cmds = repeaters("rep", 20, 25, 200*time.Millisecond, t0, func(int) time.Duration { return 0 }, cmds, exp)
			return cmds, exp
		},
	}
}

// burstSpec is Quartz's W1: n one-shot triggers all due at T0.
func burstSpec(n, nodes int) spec {
	return spec{
		name: "burst", nodes: nodes, commands: ceilDiv(n, maxTriggersPerCommand), burst: true,
		param: fmt.Sprintf("N=%d at T0", n),
		plan: func(t0 time.Time) ([]map[string]any, map[string]time.Time) {
			exp := map[string]time.Time{}
			return oneShots("burst", n, t0, func(int) time.Duration { return 0 }, nil, exp), exp
		},
	}
}

// steadySpec is Quartz's W2: rate triggers every 1 s for d, start times spread over 1 s.
func steadySpec(rate int, d time.Duration, nodes int) spec {
	fires := int(d / time.Second)
	return spec{
		name: "steady", nodes: nodes, commands: ceilDiv(rate, maxTriggersPerCommand),
		lastDue: time.Duration(fires) * time.Second, param: fmt.Sprintf("%d×1s for %ds", rate, fires),
		demand: float64(rate),
		plan: func(t0 time.Time) ([]map[string]any, map[string]time.Time) {
			exp := map[string]time.Time{}
			// Trigger times have millisecond resolution (as Quartz's), so start times are spread
			// on the millisecond grid: above 1,000/s several triggers share a millisecond.
			return repeaters("steady", rate, fires, time.Second, t0,
				func(i int) time.Duration { return time.Duration(i*1000/rate) * time.Millisecond }, nil, exp), exp
		},
	}
}

// bench runs workloads on the shared infrastructure.
type bench struct {
	o       Config
	inf     *infra
	log     *slog.Logger
	compLog *slog.Logger
	seq     int
}

// cluster is the running nodes and workers of one workload.
type cluster struct {
	stops []func() error
}

// stop stops workers first (they were started last), then nodes.
func (c *cluster) stop() error {
	var errs []error
	for i := len(c.stops) - 1; i >= 0; i-- {
		errs = append(errs, c.stops[i]())
	}
	return errors.Join(errs...)
}

func (b *bench) startNode(id, ns, dbURL string) (func() error, error) {
	ctx, cancel := context.WithCancel(context.Background())
	pool, err := store.Open(ctx, dbURL, b.o.PoolSize)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("node %s: %w", id, err)
	}
	nc, err := nats.Connect(b.inf.nats.URL(), nats.Name("agatebench-"+id))
	if err != nil {
		cancel()
		pool.Close()
		return nil, fmt.Errorf("node %s: connecting to NATS: %w", id, err)
	}
	cfg := node.Config{Namespace: ns, InstanceID: id, Logger: b.compLog, LockMode: b.o.LockMode, Partitions: b.o.Partitions}
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx, cfg, pool, nc) }()
	return func() error {
		cancel()
		err := <-done
		nc.Close()
		pool.Close()
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("node %s: %w", id, err)
		}
		return nil
	}, nil
}

func (b *bench) startWorker(id, ns string) (func() error, error) {
	nc, err := nats.Connect(b.inf.nats.URL(), nats.Name("agatebench-"+id))
	if err != nil {
		return nil, fmt.Errorf("worker %s: connecting to NATS: %w", id, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("worker %s: %w", id, err)
	}
	reg := worker.NewRegistry()
	worker.RegisterBuiltins(reg, worker.BuiltinOptions{})
	w, err := worker.New(worker.Config{Namespace: ns, InstanceID: id, Concurrency: b.o.Concurrency,
		Logger: b.compLog.With("worker", id)}, js, reg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("worker %s: %w", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() error {
		cancel()
		err := <-done
		nc.Close()
		if err != nil {
			return fmt.Errorf("worker %s: %w", id, err)
		}
		return nil
	}, nil
}

// runWorkload runs one workload in a fresh database and namespace and measures it.
func (b *bench) runWorkload(ctx context.Context, s spec) (Result, error) {
	b.seq++
	dbName := fmt.Sprintf("agatebench_%d_%s_%dn", b.seq, s.name, s.nodes)
	ns := fmt.Sprintf("bench-%s-%dn-%d-%d", s.name, s.nodes, b.seq, time.Now().Unix()%100000)
	log := b.log.With("workload", s.name, "nodes", s.nodes)
	log.Info("workload: preparing", "database", dbName, "namespace", ns, "size", s.param)
	dbURL, err := b.inf.createDB(ctx, dbName, b.o.PGSet)
	if err != nil {
		return Result{}, err
	}
	admin, err := store.Open(ctx, dbURL, 4)
	if err != nil {
		return Result{}, err
	}
	defer admin.Close()
	// Migrate once up front so the nodes start on the same schema without racing for it.
	if err := store.Migrate(ctx, admin); err != nil {
		return Result{}, err
	}

	nc, err := nats.Connect(b.inf.nats.URL(), nats.Name("agatebench-client"))
	if err != nil {
		return Result{}, fmt.Errorf("connecting to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Result{}, fmt.Errorf("opening JetStream: %w", err)
	}
	defer func() {
		// The namespace's streams are not needed afterwards; free the embedded store.
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, st := range []string{events.StreamCommands(ns), events.StreamFired(ns), events.StreamDone(ns), events.StreamEvents(ns)} {
			if err := js.DeleteStream(dctx, st); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				log.Warn("deleting stream failed", "stream", st, "error", err)
			}
		}
	}()

	cl := &cluster{}
	defer func() {
		if err := cl.stop(); err != nil {
			log.Warn("stopping the cluster", "error", err)
		}
	}()
	for i := range s.nodes {
		stop, err := b.startNode(fmt.Sprintf("n%d", i+1), ns, dbURL)
		if err != nil {
			return Result{}, err
		}
		cl.stops = append(cl.stops, stop)
	}
	for i := range b.o.Workers {
		stop, err := b.startWorker(fmt.Sprintf("w%d", i+1), ns)
		if err != nil {
			return Result{}, err
		}
		cl.stops = append(cl.stops, stop)
	}
	if err := waitReady(ctx, nc, js, ns, s.nodes); err != nil {
		return Result{}, err
	}
	log.Info("workload: nodes and workers running (in-process)", "workers", b.o.Workers,
		"concurrency", b.o.Concurrency)

	lead := b.o.Lead
	if lead == 0 {
		if lead, err = calibrateLead(ctx, nc, ns, s.commands); err != nil {
			return Result{}, err
		}
		log.Info("workload: lead time chosen from a calibration command", "lead", lead.Round(time.Millisecond))
	}
	schedStart := time.Now()
	t0 := schedStart.Add(lead).Truncate(time.Millisecond)
	cmds, expected := s.plan(t0)
	log.Info("workload: scheduling", "commands", len(cmds), "fires_expected", len(expected),
		"t0_in", time.Until(t0).Round(time.Millisecond))
	var every func(int)
	if b.o.Analyze {
		every = func(int) { analyze(ctx, admin, log) }
	}
	if err := schedule(ctx, nc, ns, cmds, 2*s.nodes, every, log); err != nil {
		return Result{}, err
	}
	if b.o.Analyze {
		analyze(ctx, admin, log)
	}
	schedEnd := time.Now()
	log.Info("workload: scheduled", "took", schedEnd.Sub(schedStart).Round(time.Millisecond),
		"before_t0", t0.Sub(schedEnd).Round(time.Millisecond))
	if schedEnd.After(t0) {
		log.Warn("scheduling finished after T0: the first fires are late because of it; raise --lead")
	}
	commitsBefore, err := xactCommits(ctx, admin)
	if err != nil {
		return Result{}, err
	}

	deadline := t0.Add(s.lastDue + b.o.Timeout)
	allSeen, timedOut, err := waitCompletions(ctx, admin, js, ns, len(expected), deadline, log)
	if err != nil {
		return Result{}, err
	}
	if timedOut {
		log.Warn("workload: timed out waiting for completions", "timeout", b.o.Timeout)
	} else {
		log.Info("workload: all completions recorded", "after_t0", allSeen.Sub(t0).Round(time.Millisecond))
		// Grace period to catch late duplicates, as the Quartz driver does.
		time.Sleep(time.Second)
	}
	commitsAfter, err := xactCommits(ctx, admin)
	if err != nil {
		return Result{}, err
	}

	r, err := measure(ctx, admin, ns, s, t0, expected)
	if err != nil {
		return Result{}, err
	}
	r.Workers, r.Concurrency, r.Demand = b.o.Workers, b.o.Concurrency, s.demand
	r.SchedulingSec = schedEnd.Sub(schedStart).Seconds()
	r.ScheduledBeforeT0Sec = t0.Sub(schedEnd).Seconds()
	r.TimedOut = timedOut
	if !timedOut && r.Completions > 0 {
		r.AllCompletedAfterT0Sec = allSeen.Sub(t0).Seconds()
		r.E2EPerSec = float64(r.Completions) / allSeen.Sub(t0).Seconds()
	}
	if r.Completions > 0 {
		// Includes the nodes' check-ins and sweeps; the bench polls JetStream, not PostgreSQL.
		r.CommitsPerFire = float64(commitsAfter-commitsBefore) / float64(r.Completions)
	}
	compare(&r)
	log.Info("workload: done", "fires_per_sec", round1(r.FiresPerSec), "e2e_per_sec", round1(r.E2EPerSec),
		"late_p50_ms", round1(r.LateP50Ms), "late_p99_ms", round1(r.LateP99Ms), "late_max_ms", round1(r.LateMaxMs),
		"dup", r.Duplicates, "missing", r.Missing)
	return r, nil
}

// calibrateLead times one schedule_job of 100 triggers due in a day (then deletes it) and returns
// a lead time long enough to send commands of that size before T0. Commands are applied one after
// another under the TRIGGER_ACCESS lock whatever the node count, so the estimate does not divide by
// nodes.
func calibrateLead(ctx context.Context, nc *nats.Conn, ns string, commands int) (time.Duration, error) {
	subject := events.Subjects(ns).API("schedule_job")
	at := time.Now().Add(24 * time.Hour).Truncate(time.Millisecond)
	var trigs []any
	for i := range maxTriggersPerCommand {
		trigs = append(trigs, oneShot("calib", fmt.Sprintf("calib-%03d", i), at))
	}
	start := time.Now()
	if err := request(ctx, nc, subject, scheduleJob("calib-cmd", "calib", "calib-job", trigs)); err != nil {
		return 0, fmt.Errorf("calibration: %w", err)
	}
	per := time.Since(start)
	del := map[string]any{"id": "calib-del", "job": map[string]any{"group": "calib", "name": "calib-job"}}
	if err := request(ctx, nc, events.Subjects(ns).API("delete_job"), del); err != nil {
		return 0, fmt.Errorf("calibration: %w", err)
	}
	return 3*time.Second + time.Duration(float64(commands)*2*float64(per)), nil
}

// waitReady waits until every node answers on the api subject and the workers' consumers exist.
func waitReady(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, ns string, nodes int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := js.Consumer(ctx, events.StreamFired(ns), events.WorkerDurable("noop"))
		if err == nil {
			// An unknown command is answered (rejected) by any node without touching the database.
			msg, rerr := nc.RequestWithContext(ctx, events.Subjects(ns).API("ping"), []byte(`{"id":"ping"}`))
			if rerr == nil && len(msg.Data) > 0 {
				return nil
			}
			err = rerr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nodes and workers not ready after 30s: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// schedule sends the schedule_job commands over the api subject, parallel requests in flight.
func schedule(ctx context.Context, nc *nats.Conn, ns string, cmds []map[string]any, parallel int,
	every func(sent int), log *slog.Logger) error {
	subject := events.Subjects(ns).API("schedule_job")
	ch := make(chan map[string]any)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range parallel {
		wg.Go(func() {
			for c := range ch {
				if err := request(ctx, nc, subject, c); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	start, last := time.Now(), time.Now()
	for i, c := range cmds {
		ch <- c
		if every != nil && i > 0 && i%analyzeEvery == 0 {
			every(i)
		}
		if time.Since(last) >= 5*time.Second {
			log.Info("workload: scheduling progress", "sent", i, "of", len(cmds), "elapsed", time.Since(start).Round(time.Millisecond))
			last = time.Now()
		}
	}
	close(ch)
	wg.Wait()
	return firstErr
}

func request(ctx context.Context, nc *nats.Conn, subject string, body map[string]any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encoding command: %w", err)
	}
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		msg, err := nc.RequestWithContext(rctx, subject, data)
		cancel()
		if errors.Is(err, nats.ErrNoResponders) && attempt < 100 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			return fmt.Errorf("schedule_job %v: %w", body["id"], err)
		}
		var out command.Outcome
		if err := json.Unmarshal(msg.Data, &out); err != nil {
			return fmt.Errorf("schedule_job %v: reply is not an outcome: %w", body["id"], err)
		}
		if !out.OK {
			if out.Transient() && attempt < 10 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return fmt.Errorf("schedule_job %v rejected: %+v", body["id"], out.Error)
		}
		return nil
	}
}

// analyzeEvery is how many commands are sent between two ANALYZEs with --analyze.
const analyzeEvery = 20

// analyze refreshes the planner statistics of the tables that grow while scheduling. Without it
// the plans pgx's cached prepared statements got on the empty tables (sequential scans) stay
// until autovacuum's ANALYZE, which may come a minute later (see the report's notes).
func analyze(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) {
	if _, err := pool.Exec(ctx, `analyze triggers, job_details, fired_triggers, events`); err != nil {
		log.Warn("ANALYZE failed", "error", err)
	}
}

func xactCommits(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `select xact_commit from pg_stat_database where datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("reading pg_stat_database: %w", err)
	}
	return n, nil
}

// waitCompletions waits until the log holds want JobCompleted events of ns or the deadline passes,
// and returns when it first saw them all. It polls JetStream rather than PostgreSQL, so as not to
// load the database it measures: the DONE stream's message count and the schedulers' shared
// completion consumer, which acks a completion only after its transaction committed. When the
// consumer has nothing pending or unacked and the stream holds want messages, one count on the
// events table confirms it.
func waitCompletions(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, ns string, want int,
	deadline time.Time, log *slog.Logger) (time.Time, bool, error) {
	lastLog := time.Now()
	for {
		now := time.Now()
		settled, msgs, err := doneSettled(ctx, js, ns)
		if err != nil {
			return time.Time{}, false, err
		}
		if settled && msgs >= uint64(want) {
			var n int
			err := pool.QueryRow(ctx, `select count(*) from events where sched_name = $1 and type = $2`,
				ns, events.TypeJobCompleted).Scan(&n)
			if err != nil {
				return time.Time{}, false, fmt.Errorf("counting completions: %w", err)
			}
			if n >= want {
				return now, false, nil
			}
		}
		if now.After(deadline) {
			return now, true, nil
		}
		if now.Sub(lastLog) >= 2*time.Second {
			log.Info("workload: waiting for completions", "published", msgs, "expected", want)
			lastLog = now
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// doneSettled reports whether the schedulers' completion consumer has applied every message of the
// DONE stream, and how many messages the stream holds.
func doneSettled(ctx context.Context, js jetstream.JetStream, ns string) (bool, uint64, error) {
	st, err := js.Stream(ctx, events.StreamDone(ns))
	if err != nil {
		return false, 0, fmt.Errorf("reading stream %s: %w", events.StreamDone(ns), err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		return false, 0, fmt.Errorf("reading stream %s: %w", events.StreamDone(ns), err)
	}
	c, err := st.Consumer(ctx, complete.DurableName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, si.State.Msgs, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("reading consumer %s: %w", complete.DurableName, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return false, 0, fmt.Errorf("reading consumer %s: %w", complete.DurableName, err)
	}
	return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream >= si.State.LastSeq, si.State.Msgs, nil
}
