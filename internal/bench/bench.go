// Package bench runs Agate's benchmark workloads as a user runs Agate, and reports their figures.
// cmd/agatebench is its command line.
//
// One run builds the scheduler, worker and nats-server binaries, starts a private PostgreSQL
// (durability at defaults, pg_stat_statements loaded) and one nats-server process, then runs
// each workload in a fresh database and namespace with K `scheduler run` and W `worker`
// processes. The bench is only a producer and a subscriber: it schedules over the public
// agate.<ns>.api.schedule_job subject and measures from the FIRED and DONE streams (ordered
// consumers), never from the database; from PostgreSQL it reads only its statistics views.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/agatesched/agate/internal/store"
)

// Config is one benchmark run.
type Config struct {
	// Workloads to run, in order: burst, steady, failover, intake.
	Workloads []string
	// DatabaseURL names a PostgreSQL server to use instead of starting a private one.
	DatabaseURL string
	// Output is "table" (markdown) or "json".
	Output         string
	BurstN         int
	BurstNodes     []int
	SteadyRate     int
	SteadyDuration time.Duration
	SteadyNodes    []int
	// Failover: steady at FailoverRate for FailoverDuration on FailoverNodes schedulers, one of
	// which is killed (SIGKILL) after a third of it.
	FailoverRate     int
	FailoverDuration time.Duration
	FailoverNodes    int
	// Compare runs the burst (BurstN jobs due at one instant) on River and, when Java and
	// Debian's Quartz are installed, on Quartz clustered, with CompareProcs worker processes
	// (River) or scheduler JVMs (Quartz) on the same PostgreSQL, after Agate's workloads.
	Compare      bool
	CompareProcs int
	// Intake: commands per measurement, node counts, the cmd path's publish window, the api
	// path's requests in flight, whether River's InsertMany is measured beside.
	IntakeN        int
	IntakeNodes    []int
	IntakeWindow   int
	IntakeInFlight int
	IntakeRiver    bool
	// TriggersPerCommand is how many triggers (of one job) each schedule_job carries; InFlight
	// how many schedule_job requests are in flight while scheduling.
	TriggersPerCommand int
	InFlight           int
	Workers            int
	Concurrency        int
	// PoolSize > 0 sets the schedulers' pool_max_conns; 0 keeps the scheduler's default.
	PoolSize   int32
	LockMode   string
	Partitions int
	// PartitionsAtOnce is the schedulers' --partitions-at-once; 0 = store.AtOnceDefault.
	PartitionsAtOnce int
	// Lead is the time from the start of scheduling to T0; 0 = calibrated.
	Lead    time.Duration
	Timeout time.Duration
	// Profile, when set, is the directory CPU profiles of the scheduler and worker processes go
	// to, ProfileSeconds long from T0 (intake: from each measurement's start).
	Profile        string
	ProfileSeconds int
	// FiresOut, when set, is the directory every workload writes its fires to, one CSV row each
	// (observer.writeFires): to see how lateness moves within a run.
	FiresOut      string
	KeepDatabases bool
	// PGSet are name=value database settings applied to each workload database.
	PGSet   []string
	Verbose bool
	// CommandLine is how the run was started, repeated in the report so it can be reproduced.
	CommandLine string
	// Rounds runs the workloads (and the peers of Compare) this many times, one round after the
	// other; 0 is 1. The machine's speed drifts between runs: rounds show by how much, and a
	// comparison holds within a round.
	Rounds int
}

// MaxRounds bounds Config.Rounds.
const MaxRounds = 20

// Workloads lists the workloads in the order Run accepts them.
var Workloads = []string{"burst", "steady", "failover", "intake"}

// Validate checks a configuration before anything starts.
func (o Config) Validate() error {
	for _, w := range o.Workloads {
		if !slices.Contains(Workloads, w) {
			return fmt.Errorf("unknown workload %q: use %s", w, strings.Join(Workloads, ", "))
		}
		if w == "intake" && (o.IntakeN <= 0 || o.IntakeWindow <= 0 || o.IntakeInFlight <= 0 || len(o.IntakeNodes) == 0) {
			return errors.New("intake: --intake-n, --intake-window, --intake-in-flight and --intake-nodes must be positive")
		}
		if o.Compare && o.CompareProcs <= 0 {
			return errors.New("--compare-procs must be positive")
		}
		if w == "failover" && (o.FailoverNodes < 2 || o.FailoverRate <= 0 || o.FailoverDuration < 3*time.Second) {
			return errors.New("failover: --failover-nodes must be at least 2 (one is killed), --failover-rate positive and --failover-duration at least 3s")
		}
	}
	for _, kv := range o.PGSet {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !settingName.MatchString(name) {
			return fmt.Errorf("--pg-set %q: use name=value with a PostgreSQL setting name", kv)
		}
	}
	if o.Output != "table" && o.Output != "json" {
		return fmt.Errorf("-o %q: use table or json", o.Output)
	}
	if o.BurstN <= 0 || o.SteadyRate <= 0 || o.SteadyDuration < time.Second || o.Workers <= 0 ||
		o.Concurrency <= 0 || o.PoolSize < 0 || o.PartitionsAtOnce < 0 || o.Timeout <= 0 || o.InFlight <= 0 || o.TriggersPerCommand <= 0 {
		return errors.New("counts must be positive and --steady-duration at least 1s")
	}
	if o.TriggersPerCommand > maxTriggersPerCommand {
		return fmt.Errorf("--triggers-per-command %d: schedule_job takes at most %d", o.TriggersPerCommand, maxTriggersPerCommand)
	}
	if o.Rounds < 0 || o.Rounds > MaxRounds {
		return fmt.Errorf("--rounds %d: use 1 to %d", o.Rounds, MaxRounds)
	}
	if o.Profile != "" && o.ProfileSeconds <= 0 {
		return errors.New("--profile-seconds must be positive")
	}
	return nil
}

// maxTriggersPerCommand is schedule_job's maxItems for triggers.
const maxTriggersPerCommand = 100

var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_.]*$`)

// Run runs the configured workloads until they finish or ctx is cancelled, logging progress to
// logw and writing the report to out.
func Run(ctx context.Context, o Config, out, logw io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	o.PartitionsAtOnce = cmp.Or(o.PartitionsAtOnce, store.AtOnceDefault)
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	inf, err := startInfra(ctx, o.DatabaseURL, o.Profile != "", log)
	if err != nil {
		return err
	}
	inf.keepDBs = o.KeepDatabases
	defer inf.close(log)

	b := &bench{o: o, inf: inf, log: log}
	rep := Report{Rounds: max(o.Rounds, 1)}
	for round := 1; round <= rep.Rounds; round++ {
		if rep.Rounds > 1 {
			log.Info("round", "round", round, "of", rep.Rounds)
		}
		if err := b.runRound(ctx, round, &rep); err != nil {
			return err
		}
	}
	rep.Env = describeEnv(inf, o)
	if o.Output == "json" {
		return writeJSON(out, rep)
	}
	writeReport(out, rep)
	return nil
}

// runRound runs every configured workload once, then the peers of --compare, and adds their rows
// to rep under round.
func (b *bench) runRound(ctx context.Context, round int, rep *Report) error {
	o := b.o
	b.round = round
	for _, w := range o.Workloads {
		var specs []spec
		switch w {
		case "intake":
			r, err := b.intake(ctx)
			if err != nil {
				return err
			}
			for i := range r {
				r[i].Round = round
			}
			rep.Intake = append(rep.Intake, r...)
		case "burst":
			for _, n := range roundOrder(o.BurstNodes, round) {
				specs = append(specs, burstSpec(o.BurstN, n))
			}
		case "steady":
			for _, n := range o.SteadyNodes {
				specs = append(specs, steadySpec(o.SteadyRate, o.SteadyDuration, n))
			}
		case "failover":
			specs = append(specs, failoverSpec(o.FailoverRate, o.FailoverDuration, o.FailoverNodes))
		}
		for _, s := range specs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := b.runWorkload(ctx, s)
			if err != nil {
				return fmt.Errorf("workload %s (%d nodes): %w", s.name, s.nodes, err)
			}
			r.Round = round
			rep.Results = append(rep.Results, r)
		}
	}
	if o.Compare {
		peers, skipped, err := b.comparePeers(ctx)
		if err != nil {
			return err
		}
		for i := range peers {
			peers[i].Round = round
		}
		rep.Peers = append(rep.Peers, peers...)
		if round == 1 {
			rep.PeersSkipped = skipped
		}
	}
	return nil
}

// roundOrder is the order in which round runs the node counts: as given in odd rounds, reversed
// in even ones, so that a drift of the machine's speed within a round (performance.md, "How to
// read a figure here" in "In short") does not always favour the same count.
func roundOrder(counts []int, round int) []int {
	if round%2 == 1 {
		return counts
	}
	r := slices.Clone(counts)
	slices.Reverse(r)
	return r
}

// intake runs the intake workload on each node count, then River's InsertMany.
func (b *bench) intake(ctx context.Context) ([]IntakeResult, error) {
	var out []IntakeResult
	for _, n := range b.o.IntakeNodes {
		r, err := b.runIntake(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("workload intake (%d nodes): %w", n, err)
		}
		out = append(out, r...)
	}
	if b.o.IntakeRiver {
		r, err := b.runRiver(ctx)
		if err != nil {
			return nil, fmt.Errorf("measuring River's InsertMany: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}
