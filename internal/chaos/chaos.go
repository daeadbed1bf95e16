package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/devenv/localpg"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/replay"
	"github.com/agatesched/agate/internal/store"
)

// Config is one chaos run.
type Config struct {
	Seed            uint64
	Duration        time.Duration // the load window; faults are injected inside it
	Schedulers      int
	Workers         int
	FaultsEvery     time.Duration // mean interval between faults
	CheckinInterval time.Duration // passed to the schedulers
	// MisfireThreshold is passed to the schedulers, high enough that no outage of the run turns a
	// due fire into a misfire.
	MisfireThreshold time.Duration
	// WorkerAckWait is passed to the workers: how soon the fires of a dead worker are redelivered.
	WorkerAckWait time.Duration
	// DrainTimeout bounds the wait for quiescence after the window.
	DrainTimeout time.Duration
	// CommandGrace is how long after the window a command may still be retried.
	CommandGrace time.Duration

	RepeatingPerSecond int // repeating triggers scheduled per second of the window
	OneShotsPerSecond  int // one-shot triggers scheduled per second
	NonconcurrentEvery int // a non-concurrent job (3 triggers) every this many seconds
	MaxExtraSchedulers int // schedulers started by faults running at once, at most

	// Dir receives the run's logs (one file per process) and the JetStream store; empty: a new
	// temporary directory. It is kept, and named in the report.
	Dir string
	// BinDir holds prebuilt scheduler, worker and nats-server binaries; empty: built with go.
	BinDir string
	// CommandLine replays the run; printed in the report.
	CommandLine string
	Logger      *slog.Logger
}

// Defaults fills the zero fields.
func (c *Config) Defaults() {
	if c.Seed == 0 {
		c.Seed = rand.Uint64()>>1 | 1
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	defi := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Duration, 2*time.Minute)
	defi(&c.Schedulers, 3)
	defi(&c.Workers, 3)
	def(&c.FaultsEvery, 5*time.Second)
	def(&c.CheckinInterval, time.Second)
	def(&c.MisfireThreshold, 10*time.Minute)
	def(&c.WorkerAckWait, 5*time.Second)
	def(&c.DrainTimeout, time.Minute)
	def(&c.CommandGrace, 30*time.Second)
	defi(&c.RepeatingPerSecond, 2)
	defi(&c.OneShotsPerSecond, 8)
	defi(&c.NonconcurrentEvery, 4)
	defi(&c.MaxExtraSchedulers, 2)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Replay is the agatechaos command line that runs the same load and fault plan again.
func (c *Config) Replay() string {
	return fmt.Sprintf("go run ./cmd/agatechaos --seed %d --duration %s --schedulers %d --workers %d --faults-every %s "+
		"--checkin-interval %s --misfire-threshold %s --ack-wait %s --repeating %d --one-shots %d --nonconcurrent-every %d",
		c.Seed, c.Duration, c.Schedulers, c.Workers, c.FaultsEvery, c.CheckinInterval, c.MisfireThreshold, c.WorkerAckWait,
		c.RepeatingPerSecond, c.OneShotsPerSecond, c.NonconcurrentEvery)
}

// checkinGrace is recovery's grace period: a node silent for 2 × its interval + this is dead.
const checkinGrace = 7500 * time.Millisecond

// newRand is the random source of one part of a run (1: load, 2: faults), fixed by the seed.
func newRand(seed, part uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, part)) }

// namespace is the scheduler namespace of the run.
const namespace = "chaos"

// Report is the outcome of a run.
type Report struct {
	Config     Config
	Results    *Results
	Faults     []FaultRecord
	Planned    int // faults planned
	Unexpected []string
	Dir        string
	Window     time.Duration
	Drained    bool
	DrainTook  time.Duration
	Commands   struct{ Sent, Confirmed, GaveUp int }
	// Replays are the log's replays after the run, from its latest snapshot and from its start:
	// at quiescence the tables must be what the log says.
	Replays   []ReplayCheck
	PGVersion string
	procs     []int // pids of every process started, for tests
}

// Failed reports whether an invariant broke.
func (r *Report) Failed() bool { return r.Results == nil || len(r.Violations()) > 0 }

// Violations names each broken invariant with its count: the results', and processes that
// exited without being told to (a crash is a bug even when its restart hides it).
func (r *Report) Violations() []string {
	var v []string
	if r.Results != nil {
		v = r.Results.Violations()
	}
	if n := len(r.Unexpected); n > 0 {
		v = append(v, fmt.Sprintf("%d processes that exited on their own", n))
	}
	for _, c := range r.Replays {
		if !c.Equal() {
			v = append(v, "the tables differ from the log replayed "+c.From)
		}
	}
	return v
}

// ReplayCheck is one replay of the log against the tables.
type ReplayCheck struct {
	From   string // "from its latest snapshot" or "from its start"
	Report replay.Report
	Err    error // replay could not apply the log (an event on a row the log never made)
}

// Equal says the replay ran and the tables are what the log says.
func (c ReplayCheck) Equal() bool { return c.Err == nil && c.Report.Equal() }

// snapshotInterval is passed to the schedulers: each one's first upkeep pass, at its start, takes
// a snapshot of the log's projection while the load and the faults go on, and the replay from the
// latest one after the run checks that it is a prefix of the log.
const snapshotInterval = time.Second

// checkReplays replays the quiet namespace's log from its latest snapshot and from its start.
func checkReplays(ctx context.Context, dbURL string) ([]ReplayCheck, error) {
	pool, err := store.Open(ctx, dbURL, 2)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	var checks []ReplayCheck
	for _, fromStart := range []bool{false, true} {
		c := ReplayCheck{From: "from its latest snapshot"}
		if fromStart {
			c.From = "from its start"
		}
		c.Report, c.Err = replay.Run(ctx, pool, namespace, replay.Options{FromStart: fromStart})
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		checks = append(checks, c)
	}
	return checks, nil
}

// cluster is the system under test.
type cluster struct {
	cfg     Config
	log     *slog.Logger
	sup     *supervisor
	pg      *localpg.Cluster
	dbURL   string
	natsURL string

	mu    sync.Mutex
	sched []string // scheduler slots in service
}

func (c *cluster) slots(role string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if role == roleScheduler {
		return slices.Clone(c.sched)
	}
	var out []string
	for i := 1; i <= c.cfg.Workers; i++ {
		out = append(out, fmt.Sprintf("w%d", i))
	}
	return out
}

func (c *cluster) addSlot(slot string) {
	c.mu.Lock()
	c.sched = append(c.sched, slot)
	c.mu.Unlock()
}

func (c *cluster) removeSlot(slot string) {
	c.mu.Lock()
	c.sched = slices.DeleteFunc(c.sched, func(s string) bool { return s == slot })
	c.mu.Unlock()
}

// restartNATS stops nats-server with SIGTERM (SIGKILL after 10 s), waits down and starts it on
// the same port and store.
func (c *cluster) restartNATS(ctx context.Context, down time.Duration) string {
	p := c.sup.get("nats")
	c.sup.expectExit(p)
	_ = p.signal(15)
	if !p.wait(10 * time.Second) {
		_ = p.signal(9)
		<-p.done
	}
	sleep(ctx, down)
	np, err := c.sup.start("nats", roleNATS)
	if err != nil {
		return "restart failed: " + err.Error()
	}
	_ = WaitTCP(ctx, c.natsURL[len("nats://"):], 10*time.Second)
	return fmt.Sprintf("down %s, back as %s", down.Round(100*time.Millisecond), np.id)
}

// Run runs the chaos suite: it starts the cluster, applies load and faults for cfg.Duration,
// waits for quiescence, checks the invariants and writes the report to out. The returned report
// says whether an invariant broke; err is a failure to run the suite at all. Every process it
// started is stopped before it returns.
func Run(ctx context.Context, cfg Config, out io.Writer) (rep *Report, err error) {
	cfg.Defaults()
	log := cfg.Logger
	rep = &Report{Config: cfg}

	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "agate-chaos-"); err != nil {
			return nil, err
		}
	}
	rep.Dir = dir
	logDir := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	binDir := cfg.BinDir
	if binDir == "" {
		binDir = filepath.Join(dir, "bin")
		if err := BuildBinaries(ctx, binDir, log); err != nil {
			return nil, err
		}
	}

	// PostgreSQL, with durability on, in a data directory of its own.
	// The data directory and the JetStream store stay for a post-mortem when an invariant broke
	// (start PostgreSQL again with pg_ctl -D <dir>/postgres, nats-server with -js -sd <dir>/jetstream).
	if err := os.Chmod(dir, 0o755); err != nil { // PostgreSQL may run as another user
		return nil, err
	}
	pgDir := filepath.Join(dir, "postgres")
	storeDir := filepath.Join(dir, "jetstream")
	pg, err := localpg.Start(ctx, localpg.Config{DataDir: pgDir, Fsync: true, Logger: log.With("component", "localpg")})
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL: %w", err)
	}
	c := &cluster{cfg: cfg, log: log, pg: pg, dbURL: pg.URL("postgres")}
	defer func() {
		if serr := pg.Stop(context.WithoutCancel(ctx)); serr != nil {
			log.Warn("chaos: stopping PostgreSQL failed", "error", serr)
		}
		if b, rerr := os.ReadFile(filepath.Join(pgDir, "postgres.log")); rerr == nil {
			_ = os.WriteFile(filepath.Join(logDir, "postgresql.log"), b, 0o644)
		}
		if rep != nil && rep.Results != nil && !rep.Failed() {
			_ = os.RemoveAll(pgDir)
			_ = os.RemoveAll(storeDir)
		}
	}()

	natsPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	c.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", natsPort)

	args := func(role, id string) []string {
		switch role {
		case roleNATS:
			return []string{"-js", "-sd", storeDir, "-a", "127.0.0.1", "-p", itoa(natsPort)}
		case roleScheduler:
			return []string{"run", "--database-url", c.dbURL, "--nats-url", c.natsURL, "--namespace", namespace,
				"--instance-id", id, "--checkin-interval", cfg.CheckinInterval.String(),
				"--misfire-threshold", cfg.MisfireThreshold.String(), "--snapshot-interval", snapshotInterval.String()}
		default:
			return []string{"--nats-url", c.natsURL, "--namespace", namespace, "--instance-id", id,
				"--ack-wait", cfg.WorkerAckWait.String(), "--concurrency", "20", "--drain-timeout", "10s"}
		}
	}
	c.sup = newSupervisor(binDir, logDir, args, log)
	defer func() {
		c.sup.stopAll(20 * time.Second)
		for _, p := range c.sup.all {
			rep.procs = append(rep.procs, p.cmd.Process.Pid)
		}
	}()

	if _, err := c.sup.start("nats", roleNATS); err != nil {
		return nil, err
	}
	if err := WaitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", natsPort), 20*time.Second); err != nil {
		return nil, fmt.Errorf("nats-server: %w (log %s)", err, c.sup.get("nats").logPath)
	}
	// Migrate once, so that the nodes do not race to.
	if out, err := runOnce(ctx, filepath.Join(binDir, "scheduler"), "migrate", "--database-url", c.dbURL); err != nil {
		return nil, fmt.Errorf("scheduler migrate: %w\n%s", err, out)
	}
	for i := 1; i <= cfg.Schedulers; i++ {
		slot := fmt.Sprintf("s%d", i)
		c.addSlot(slot)
		if _, err := c.sup.start(slot, roleScheduler); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= cfg.Workers; i++ {
		if _, err := c.sup.start(fmt.Sprintf("w%d", i), roleWorker); err != nil {
			return nil, err
		}
	}

	nc, err := nats.Connect(c.natsURL, nats.Name("agate-chaos producer"), nats.MaxReconnects(-1),
		nats.ReconnectWait(200*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	if err := waitReady(ctx, nc, cfg.Schedulers); err != nil {
		return nil, fmt.Errorf("%w; logs in %s", err, logDir)
	}
	conn, err := pgx.Connect(ctx, c.dbURL)
	if err == nil {
		_ = conn.QueryRow(ctx, "show server_version").Scan(&rep.PGVersion)
		_ = conn.Close(ctx)
	}

	// The window: load and faults.
	t0 := time.Now()
	loadEnd := t0.Add(cfg.Duration)
	log.Info("chaos: load window starts", "seed", cfg.Seed, "duration", cfg.Duration, "logs", logDir)
	prod := &producer{nc: nc, subject: events.Subjects(namespace).API("schedule_job"),
		rng: newRand(cfg.Seed, 1), log: log, cfg: &cfg}
	stopFor := 2*cfg.CheckinInterval + checkinGrace + 2*time.Second
	plan := planFaults(newRand(cfg.Seed, 2), 5*time.Second, cfg.Duration-10*time.Second,
		cfg.FaultsEvery, stopFor)
	rep.Planned = len(plan)
	inj := &injector{c: c, t0: t0, busy: map[string]bool{}}
	var wg sync.WaitGroup
	wg.Go(func() { prod.run(ctx, t0, loadEnd) })
	wg.Go(func() { inj.run(ctx, plan) })
	wg.Wait()
	rep.Window = time.Since(t0)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.Faults = inj.Records()
	rep.Commands.Sent, rep.Commands.Confirmed, rep.Commands.GaveUp = prod.sent, prod.confirmed, prod.gaveUp

	// Quiescence, then the check.
	drainStart := time.Now()
	rep.Drained, err = waitQuiet(ctx, c.dbURL, time.Until(loadEnd)+cfg.DrainTimeout, log)
	rep.DrainTook = time.Since(drainStart)
	if err != nil {
		return nil, err
	}
	lg, err := readLog(ctx, c.dbURL)
	if err != nil {
		return nil, err
	}
	rep.Results = Check(lg, prod.Plan(), rep.Faults)
	if rep.Replays, err = checkReplays(ctx, c.dbURL); err != nil {
		return nil, fmt.Errorf("replaying the log: %w", err)
	}
	rep.Unexpected = c.sup.Unexpected()
	WriteReport(out, rep)
	return rep, nil
}

func waitReady(ctx context.Context, nc *nats.Conn, schedulers int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	subject := events.Subjects(namespace).API("ping")
	for {
		// An unknown command is answered (rejected) by a node without touching the database.
		msg, err := nc.RequestWithContext(ctx, subject, []byte(`{"id":"ping"}`))
		if err == nil && len(msg.Data) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no scheduler answers on %s after 60s: %w", subject, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitQuiet waits until the namespace has nothing left to do (no trigger, no fired row) and the
// log has not grown for a few seconds, or until timeout; false when it timed out.
func waitQuiet(ctx context.Context, dbURL string, timeout time.Duration, log *slog.Logger) (bool, error) {
	deadline := time.Now().Add(timeout)
	var lastSeq int64 = -1
	quiet := 0
	for {
		var trigs, fired int
		var seq int64
		err := func() error {
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(qctx, dbURL)
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			return conn.QueryRow(qctx, `select
				(select count(*) from triggers where sched_name = $1),
				(select count(*) from fired_triggers where sched_name = $1),
				(select coalesce(max(seq), 0) from events where sched_name = $1)`, namespace).Scan(&trigs, &fired, &seq)
		}()
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if err == nil {
			if trigs == 0 && fired == 0 && seq == lastSeq {
				quiet++
			} else {
				quiet = 0
			}
			lastSeq = seq
			if quiet >= 3 {
				return true, nil
			}
		}
		if time.Now().After(deadline) {
			log.Warn("chaos: not quiet before the deadline", "triggers", trigs, "fired rows", fired, "error", err)
			return false, nil
		}
		sleep(ctx, time.Second)
	}
}

// readLog reads the events the checker needs.
func readLog(ctx context.Context, dbURL string) (Log, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return Log{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `select seq, type, source, time, data from events
		where sched_name = $1 and type = any($2) order by seq`, namespace,
		[]string{events.TypeJobFired, events.TypeJobCompleted, events.TypeJobFailed, events.TypeTriggerReleased,
			events.TypeTriggerScheduled, events.TypeTriggerMisfired, events.TypeTriggerError})
	if err != nil {
		return Log{}, err
	}
	defer rows.Close()
	return scanLog(rows)
}

// logRow is one row of the events table as the checker reads it.
type logRow struct {
	Seq    int64
	Type   string
	Source string
	Time   time.Time
	Data   []byte
}

func scanLog(rows pgx.Rows) (Log, error) {
	var rs []logRow
	for rows.Next() {
		var r logRow
		if err := rows.Scan(&r.Seq, &r.Type, &r.Source, &r.Time, &r.Data); err != nil {
			return Log{}, err
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return Log{}, err
	}
	return parseLog(rs)
}

func runOnce(ctx context.Context, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := commandOutput(ctx, bin, args...)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%s timed out: %w", bin, err)
	}
	return out, err
}
