// Command agatebench runs Agate's benchmark workloads end to end (internal/bench) and prints their
// figures beside baselines measured with Quartz and River.
//
//	go run ./cmd/agatebench                         # accept, burst on 1/2/4 nodes, steady
//	go run ./cmd/agatebench --workloads burst --burst-nodes 2 --cpuprofile /tmp/cpu.out
//	go run ./cmd/agatebench --workloads steady --steady-rate 5000
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/bench"
	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/node"
)

func main() {
	if err := rootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	var o bench.Config
	var burstNodes, steadyNodes, intakeNodes string
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
  intake  command intake: the built scheduler binaries as separate processes (and nats-server),
          on each count of --intake-nodes; a producer in this process sends --intake-n
          schedule_job commands (one one-shot trigger due in a day each) (a) on the durable cmd
          subject with asynchronous publishing (--intake-window unacknowledged at most), timed
          until a CommandAccepted event was seen for each, then (b) on the api subject with
          --intake-in-flight requests in flight; then River's InsertMany of as many jobs on the
          same server. Prints commands/s and the CPU seconds of postgres, nats-server, the
          schedulers and the bench during each.
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
The Quartz and River figures are baselines measured on a 2-core machine with Quartz 2.3.2
clustered and River v0.51.1, hard-coded until a later benchmark runs the peers side by side;
run nothing else heavy on the machine while timing.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.BurstNodes, err = parseInts(burstNodes); err != nil {
				return fmt.Errorf("--burst-nodes: %w", err)
			}
			if o.SteadyNodes, err = parseInts(steadyNodes); err != nil {
				return fmt.Errorf("--steady-nodes: %w", err)
			}
			if o.IntakeNodes, err = parseInts(intakeNodes); err != nil {
				return fmt.Errorf("--intake-nodes: %w", err)
			}
			o.CommandLine = strings.Join(append([]string{"go run ./cmd/agatebench"}, os.Args[1:]...), " ")
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			err = bench.Run(ctx, o, os.Stdout, os.Stderr)
			if err != nil {
				fmt.Fprintln(os.Stderr, "agatebench:", err)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Workloads, "workloads", []string{"accept", "burst", "steady"}, "workloads to run, in order: accept, burst, steady, intake")
	f.StringVar(&o.DatabaseURL, "database-url", "", "use this PostgreSQL server (a URL to any database on it; the bench creates and drops its own databases) instead of starting a private one")
	f.StringVarP(&o.Output, "output", "o", "table", "output format: table (markdown) or json")
	f.IntVar(&o.BurstN, "burst-n", 20000, "burst: one-shot triggers due at T0")
	f.StringVar(&burstNodes, "burst-nodes", "1,2,4", "burst: node counts to run, comma-separated")
	f.IntVar(&o.AcceptNodes, "accept-nodes", 2, "accept: scheduler nodes")
	f.IntVar(&o.SteadyRate, "steady-rate", 500, "steady: triggers firing every 1 s, i.e. fires/s demanded (the target is 5000)")
	f.DurationVar(&o.SteadyDuration, "steady-duration", 30*time.Second, "steady: how long each trigger repeats")
	f.StringVar(&steadyNodes, "steady-nodes", "2", "steady: node counts to run, comma-separated")
	f.IntVar(&o.IntakeN, "intake-n", 20000, "intake: schedule_job commands per measurement")
	f.StringVar(&intakeNodes, "intake-nodes", "1,2,4", "intake: scheduler process counts to run, comma-separated")
	f.IntVar(&o.IntakeWindow, "intake-window", 1000, "intake: cmd path, commands published and not yet acknowledged by JetStream at most")
	f.IntVar(&o.IntakeInFlight, "intake-in-flight", 64, "intake: api path, requests in flight")
	f.BoolVar(&o.IntakeRiver, "intake-river", true, "intake: measure River v0.51.1's InsertMany on the same server (internal/bench/riverinsert, fetched by go)")
	f.StringVar(&o.IntakeProfile, "intake-profile", "", "intake: write a CPU profile of each scheduler process per measurement into this directory ("+cli.PprofEnv+")")
	f.IntVar(&o.IntakeProfileSeconds, "intake-profile-seconds", 3, "intake: length of each CPU profile")
	f.IntVar(&o.Workers, "workers", 2, "workers per workload")
	f.IntVar(&o.Concurrency, "concurrency", 200, "jobs each worker runs at once")
	f.Int32Var(&o.PoolSize, "pool-size", 8, "PostgreSQL connections per scheduler node")
	f.StringVar(&o.LockMode, "lock-mode", "partitioned", "scheduler lock protocol: global (Quartz-exact) or partitioned")
	f.IntVar(&o.Partitions, "partitions", node.PartitionsDefault, "lock partitions with --lock-mode partitioned")
	f.DurationVar(&o.Lead, "lead", 0, "time from the start of scheduling to T0; 0 = 3s + 2 × commands × the time one calibration command took")
	f.DurationVar(&o.Timeout, "timeout", 60*time.Second, "per workload: how long after its last due time to wait for completions")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run (nodes and workers included) to this file")
	f.BoolVar(&o.KeepDatabases, "keep-databases", false, "do not drop the workload databases at the end (useful with --database-url)")
	f.BoolVar(&o.Analyze, "analyze", true, "ANALYZE the workload's tables every 20 commands while scheduling and once before T0 (false: leave statistics to autovacuum and see the effect of plans made on empty tables)")
	f.StringSliceVar(&o.PGSet, "pg-set", nil, "diagnostics: ALTER DATABASE <workload db> SET name = 'value' before the nodes connect, e.g. enable_nestloop=off (repeatable)")
	f.BoolVarP(&o.Verbose, "verbose", "v", false, "log the nodes' and workers' info messages too")
	cli.Setup(cmd, "agatebench")
	return cmd
}

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
