// Package bench runs Agate's benchmark workloads end to end and reports their figures beside
// those of Quartz and River (see report.go for where those come from). cmd/agatebench is its
// command line.
//
// One run starts a private PostgreSQL (durability at defaults, as the Quartz and River runs had)
// and an embedded JetStream, then runs each workload in a fresh database and namespace with N
// scheduler nodes and W workers, all in this process. Figures are computed from the event log
// once every expected completion is recorded: lateness = JobCompleted.startedTime −
// scheduledTime per fire.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// Config is one benchmark run.
type Config struct {
	// Workloads to run, in order: accept, burst, steady, intake.
	Workloads []string
	// DatabaseURL names a PostgreSQL server to use instead of starting a private one.
	DatabaseURL string
	// Output is "table" (markdown) or "json".
	Output         string
	BurstN         int
	BurstNodes     []int
	AcceptNodes    int
	SteadyRate     int
	SteadyDuration time.Duration
	SteadyNodes    []int
	// Intake: commands per measurement, node counts, the cmd path's publish window, the api
	// path's requests in flight, whether River's InsertMany is measured beside, and where CPU
	// profiles of the scheduler processes go (empty: none) and how long each lasts.
	IntakeN              int
	IntakeNodes          []int
	IntakeWindow         int
	IntakeInFlight       int
	IntakeRiver          bool
	IntakeProfile        string
	IntakeProfileSeconds int
	Workers              int
	Concurrency          int
	PoolSize             int32
	LockMode             string
	Partitions           int
	// Lead is the time from the start of scheduling to T0; 0 = calibrated.
	Lead    time.Duration
	Timeout time.Duration
	// CPUProfile, when set, is the file a CPU profile of the whole run is written to.
	CPUProfile    string
	KeepDatabases bool
	Analyze       bool
	// PGSet are name=value database settings applied to each workload database.
	PGSet   []string
	Verbose bool
	// CommandLine is how the run was started, repeated in the report so it can be reproduced.
	CommandLine string
}

// Validate checks a configuration before anything starts.
func (o Config) Validate() error {
	for _, w := range o.Workloads {
		if !slices.Contains([]string{"accept", "burst", "steady", "intake"}, w) {
			return fmt.Errorf("unknown workload %q: use accept, burst, steady or intake", w)
		}
		if w == "intake" && (o.IntakeN <= 0 || o.IntakeWindow <= 0 || o.IntakeInFlight <= 0 || len(o.IntakeNodes) == 0) {
			return errors.New("intake: --intake-n, --intake-window, --intake-in-flight and --intake-nodes must be positive")
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
		o.Concurrency <= 0 || o.AcceptNodes <= 0 || o.PoolSize <= 0 || o.Timeout <= 0 {
		return errors.New("counts must be positive and --steady-duration at least 1s")
	}
	return nil
}

var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_.]*$`)

// Run runs the configured workloads until they finish or ctx is cancelled, logging progress to
// logw and writing the results to out.
func Run(ctx context.Context, o Config, out, logw io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	compLevel := slog.LevelWarn
	if o.Verbose {
		compLevel = slog.LevelInfo
	}
	compLog := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: compLevel}))

	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return fmt.Errorf("creating CPU profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("starting CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	inf, err := startInfra(ctx, o.DatabaseURL, log)
	if err != nil {
		return err
	}
	inf.keepDBs = o.KeepDatabases
	defer inf.close(log)

	b := &bench{o: o, inf: inf, log: log, compLog: compLog}
	var results []Result
	var intake []IntakeResult
	for _, w := range o.Workloads {
		var specs []spec
		switch w {
		case "intake":
			r, err := b.intake(ctx)
			if err != nil {
				return err
			}
			intake = append(intake, r...)
		case "accept":
			specs = append(specs, acceptSpec(o.AcceptNodes))
		case "burst":
			for _, n := range o.BurstNodes {
				specs = append(specs, burstSpec(o.BurstN, n))
			}
		case "steady":
			for _, n := range o.SteadyNodes {
				specs = append(specs, steadySpec(o.SteadyRate, o.SteadyDuration, n))
			}
		}
		for _, s := range specs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := b.runWorkload(ctx, s)
			if err != nil {
				return fmt.Errorf("workload %s (%d nodes): %w", s.name, s.nodes, err)
			}
			results = append(results, r)
		}
	}
	env := describeEnv(inf, o)
	if o.Output == "json" {
		return writeJSON(out, env, results, intake)
	}
	if len(results) > 0 || len(intake) == 0 {
		writeTable(out, env, results)
	}
	if len(intake) > 0 {
		fmt.Fprintf(out, "## agatebench intake (%s)\n\n`%s` — %s, %d CPUs, %s (fsync=%s, synchronous_commit=%s).\n\n", env.When.Format(time.RFC3339),
			env.Command, env.GoVersion, env.CPUs, env.PostgreSQL, env.PGSettings["fsync"], env.PGSettings["synchronous_commit"])
		writeIntakeTable(out, intake)
	}
	return nil
}

// intake runs the intake workload on each node count, then River's InsertMany.
func (b *bench) intake(ctx context.Context) ([]IntakeResult, error) {
	env, err := b.startIntakeEnv(ctx)
	if err != nil {
		return nil, err
	}
	defer env.close()
	var out []IntakeResult
	for _, n := range b.o.IntakeNodes {
		r, err := b.runIntake(ctx, env, n)
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
