// Command agatebench runs Agate's benchmark workloads end to end and prints their figures side by
// side with the Quartz and River anchors measured on the same machine (../shared/anchors).
//
// One run starts a private PostgreSQL (durability at defaults, as the anchors) and an embedded
// JetStream, then runs each workload in a fresh database and namespace with N scheduler nodes and
// W workers, all in this process. Figures are computed from the event log once every expected
// completion is recorded: lateness = JobCompleted.startedTime − scheduledTime per fire.
//
//	go run ./cmd/agatebench                         # accept, burst on 1/2/4 nodes, steady
//	go run ./cmd/agatebench --workloads burst --burst-nodes 2 --cpuprofile /tmp/cpu.out
//	go run ./cmd/agatebench --workloads steady --steady-rate 5000
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/agatesched/agate/internal/node"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// options are the command's flags.
type options struct {
	workloads      []string
	databaseURL    string
	output         string
	burstN         int
	burstNodes     []int
	acceptNodes    int
	steadyRate     int
	steadyDuration time.Duration
	steadyNodes    []int
	workers        int
	concurrency    int
	poolSize       int32
	lockMode       string
	partitions     int
	lead           time.Duration
	timeout        time.Duration
	cpuProfile     string
	keepDB         bool
	analyze        bool
	pgSet          []string
	verbose        bool
}

func main() {
	if err := rootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	var o options
	var burstNodes, steadyNodes string
	cmd := &cobra.Command{
		Use:   "agatebench",
		Short: "Run Agate's benchmark workloads and compare them with the Quartz and River anchors",
		Long: `agatebench measures Agate end to end: trigger scheduled by command -> JobFired -> worker ->
completion recorded in the event log.

It starts a private PostgreSQL from the machine's binaries (fsync, synchronous_commit and
full_page_writes on, as the anchors) unless --database-url names a server, and an embedded NATS
JetStream server with a temporary store. Each workload gets a fresh database (CREATE DATABASE)
and a fresh namespace. Scheduler nodes (node.Run) and workers (worker.New + RegisterBuiltins,
job type noop) run as goroutines in this process, each node with its own pgxpool and NATS
connection; all traffic stays on 127.0.0.1.

Workloads:
  accept  2 nodes: 1,000 one-shot triggers due within 2 s (spread evenly) + 20 triggers
          repeating every 200 ms for 5 s (25 fires each) = 1,500 fires.
  burst   Quartz's W1: N one-shot triggers all due at the same instant T0, on each node count
          of --burst-nodes. fires/s = N / (last job start - T0), Quartz's "T0->last exec".
  steady  Quartz's W2: R triggers every 1 s for D (start times spread over 1 s); fires/s =
          fires / (last start - first start); lateness per window (a third of the run) shows
          whether the backlog grows.

Triggers are scheduled over agate.<ns>.api.schedule_job (up to 100 triggers per command) before
T0. Figures come from the events table after every expected JobCompleted is in it (or the
workload timed out): lateness = startedTime - scheduledTime, duplicates = (trigger, scheduled
time) fired more than once, missing = expected (trigger, scheduled time) never completed.
"e2e/s" = fires / (moment all completions were seen in the log - T0), River's definition.

Before scheduling, the bench waits until a node answers on the api subject (it sends the unknown
command "ping", which a node rejects and logs) and the workers' consumer exists. T0 is chosen
from the time one 100-trigger calibration command takes (then deleted), unless --lead is given.
Completion is detected by polling JetStream (the DONE stream and the schedulers' completion
consumer), not PostgreSQL, so that the bench does not load the database it measures.
With --analyze (the default) the bench runs ANALYZE every 20 commands while scheduling: plans
made while the tables were empty otherwise stay cached until autovacuum analyzes them.

Progress goes to stderr; the results table (markdown, or JSON with -o json) to stdout.
Timed runs take /tmp/anchor-bench.lock if run under flock, as the anchors did:
  flock /tmp/anchor-bench.lock go run ./cmd/agatebench`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.burstNodes, err = parseInts(burstNodes); err != nil {
				return fmt.Errorf("--burst-nodes: %w", err)
			}
			if o.steadyNodes, err = parseInts(steadyNodes); err != nil {
				return fmt.Errorf("--steady-nodes: %w", err)
			}
			if err := o.validate(); err != nil {
				return err
			}
			err = run(cmd.Context(), o)
			if err != nil {
				fmt.Fprintln(os.Stderr, "agatebench:", err)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.workloads, "workloads", []string{"accept", "burst", "steady"}, "workloads to run, in order: accept, burst, steady")
	f.StringVar(&o.databaseURL, "database-url", "", "use this PostgreSQL server (a URL to any database on it; the bench creates and drops its own databases) instead of starting a private one")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table (markdown) or json")
	f.IntVar(&o.burstN, "burst-n", 20000, "burst: one-shot triggers due at T0")
	f.StringVar(&burstNodes, "burst-nodes", "1,2,4", "burst: node counts to run, comma-separated")
	f.IntVar(&o.acceptNodes, "accept-nodes", 2, "accept: scheduler nodes")
	f.IntVar(&o.steadyRate, "steady-rate", 500, "steady: triggers firing every 1 s, i.e. fires/s demanded (DESIGN's target is 5000)")
	f.DurationVar(&o.steadyDuration, "steady-duration", 30*time.Second, "steady: how long each trigger repeats")
	f.StringVar(&steadyNodes, "steady-nodes", "2", "steady: node counts to run, comma-separated")
	f.IntVar(&o.workers, "workers", 2, "workers per workload")
	f.IntVar(&o.concurrency, "concurrency", 200, "jobs each worker runs at once")
	f.Int32Var(&o.poolSize, "pool-size", 8, "PostgreSQL connections per scheduler node")
	f.StringVar(&o.lockMode, "lock-mode", "partitioned", "scheduler lock protocol: global (Quartz-exact) or partitioned")
	f.IntVar(&o.partitions, "partitions", node.PartitionsDefault, "lock partitions with --lock-mode partitioned")
	f.DurationVar(&o.lead, "lead", 0, "time from the start of scheduling to T0; 0 = 3s + 2 × commands × the time one calibration command took")
	f.DurationVar(&o.timeout, "timeout", 60*time.Second, "per workload: how long after its last due time to wait for completions")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (nodes and workers included) to this file")
	f.BoolVar(&o.keepDB, "keep-databases", false, "do not drop the workload databases at the end (useful with --database-url)")
	f.BoolVar(&o.analyze, "analyze", true, "ANALYZE the workload's tables every 20 commands while scheduling and once before T0 (false: leave statistics to autovacuum and see the effect of plans made on empty tables)")
	f.StringSliceVar(&o.pgSet, "pg-set", nil, "diagnostics: ALTER DATABASE <workload db> SET name = 'value' before the nodes connect, e.g. enable_nestloop=off (repeatable)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log the nodes' and workers' info messages too")
	return cmd
}

func (o options) validate() error {
	for _, w := range o.workloads {
		if !slices.Contains([]string{"accept", "burst", "steady"}, w) {
			return fmt.Errorf("unknown workload %q: use accept, burst or steady", w)
		}
	}
	for _, kv := range o.pgSet {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !settingName.MatchString(name) {
			return fmt.Errorf("--pg-set %q: use name=value with a PostgreSQL setting name", kv)
		}
	}
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("-o %q: use table or json", o.output)
	}
	if o.burstN <= 0 || o.steadyRate <= 0 || o.steadyDuration < time.Second || o.workers <= 0 ||
		o.concurrency <= 0 || o.acceptNodes <= 0 || o.poolSize <= 0 || o.timeout <= 0 {
		return errors.New("counts must be positive and --steady-duration at least 1s")
	}
	return nil
}

var settingName = regexp.MustCompile(`^[a-z_][a-z0-9_.]*$`)

func parseInts(s string) ([]int, error) {
	var out []int
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", p)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("no node counts given")
	}
	return out, nil
}

func run(ctx context.Context, o options) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	compLevel := slog.LevelWarn
	if o.verbose {
		compLevel = slog.LevelInfo
	}
	compLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: compLevel}))

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("creating CPU profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("starting CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	inf, err := startInfra(ctx, o.databaseURL, log)
	if err != nil {
		return err
	}
	inf.keepDBs = o.keepDB
	defer inf.close(log)

	b := &bench{o: o, inf: inf, log: log, compLog: compLog}
	var results []Result
	for _, w := range o.workloads {
		var specs []spec
		switch w {
		case "accept":
			specs = append(specs, acceptSpec(o.acceptNodes))
		case "burst":
			for _, n := range o.burstNodes {
				specs = append(specs, burstSpec(o.burstN, n))
			}
		case "steady":
			for _, n := range o.steadyNodes {
				specs = append(specs, steadySpec(o.steadyRate, o.steadyDuration, n))
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
	if o.output == "json" {
		return writeJSON(os.Stdout, env, results)
	}
	writeTable(os.Stdout, env, results)
	return nil
}

// osArgs is the command's arguments, for the reproduction line in the report.
func osArgs() []string { return os.Args[1:] }
