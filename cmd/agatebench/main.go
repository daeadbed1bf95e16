// Command agatebench runs Agate's benchmark workloads as a user runs Agate (internal/bench):
// separate scheduler, worker and nats-server processes, a producer on the public subjects and a
// subscriber on the FIRED and DONE streams.
//
//	go run ./cmd/agatebench                         # burst on 2 and 4 nodes, steady, failover
//	go run ./cmd/agatebench --workloads burst --burst-nodes 2 --profile /tmp/prof
//	go run ./cmd/agatebench --workloads steady --steady-rate 1000 --steady-duration 20s
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
		Short: "Run Agate's benchmark workloads end to end, with Agate run as a user runs it",
		Long: `agatebench measures Agate end to end, black-box: schedule_job on the public subject ->
JobFired on the FIRED stream -> a worker runs the job -> JobCompleted on the DONE stream.

Processes. It builds the scheduler, worker and nats-server binaries, starts a private PostgreSQL
from the machine's binaries (fsync, synchronous_commit and full_page_writes on; pg_stat_statements
preloaded) unless --database-url names a server, and one nats-server process with JetStream.
Each workload gets a fresh database and namespace, K 'scheduler run' processes (n1..nK) and
--workers 'worker' processes (w1..wW, job type noop). Logs go to a temporary directory, printed
at the end. The bench never runs ANALYZE or touches the tables: plans are what a fresh
deployment gets.

Scheduling. The bench is a producer: schedule_job requests on agate.<ns>.api.schedule_job,
--triggers-per-command triggers (of one job) each, --in-flight requests at once. T0 is chosen so
that scheduling ends before it (3s + 3 x the time the commands take at the rate of calibration
commands like them, sent and deleted first) unless --lead is given.

Observation. The bench reads the namespace's FIRED and DONE streams as any subscriber could,
but after the fact, so that watching costs the measured machine next to nothing: while the
workload runs it polls the DONE stream's message count, twice a second until the last
expected fire is due and every 10ms from then (as River's harness polls its completed count);
once it holds a message per expected fire, or from the last due time once it stands still for
50ms (a worker puts the outcomes that end together in one message), ordered consumers read both
streams and record per fire its fireId, trigger, scheduledTime, firedTime, node (the event's
source), startedTime, finishedTime and when JetStream stored the completion. A run ends when
every expected (trigger, scheduled time) has a JobCompleted (or --timeout after the last due
time); the streams are read again once quiet for 1s, to count late duplicates. CPU figures end
when the schedulers had applied every completion (their consumer of the DONE stream had nothing
pending or unacked: "applied"), which the bench waits for from when the count was reached,
before it reads anything, or else (outcomes batched) from when the DONE stream's read found
every completion, that read's decoding counted in the bench's figure; the report also gives the
part used until the DONE stream held every completion (the end-to-end interval), sampled right
before the read that found them all, so without that decoding.

Figures:
  fires/s       burst: fires / (last firedTime - T0); steady, failover: fires / (last - first firedTime)
  e2e/s         expected fires / (last completion stored - T0)
  applied       T0 + how long until the schedulers had applied every completion
  applied before the last fire
                bursts: completions whose JobDeleted (read from the EVENTS stream
                afterwards) was logged before the last firedTime, and T0 + when the first was:
                completions applied while fires are still made compete with them
  lateness      p50 / p99 / max against scheduledTime of: fire = firedTime, published = when
                JetStream stored the JobFired, start = startedTime, e2e = when JetStream stored
                the JobCompleted
  dup           (trigger, scheduled time) with more than one fireId, plus fireIds completed
                more than once
  missing       expected (trigger, scheduled time) without JobCompleted
  commits/fire, writes/fire
                pg_stat_database xact_commit and tup_inserted+tup_updated+tup_deleted of the
                workload database from T0 to the end, / fires
  top statements  pg_stat_statements (reset right before T0) by total time, calls per fire
  CPU s         per process over the measured interval: postgres (postmaster and backends; with
                --database-url when the server runs on this machine and its data_directory
                can be read), nats-server, each scheduler, each worker, the bench; and all of
                them per fire
  machine       the machine's CPUs from T0 until the DONE stream held every completion
                (/proc/stat, whatever ran on them): cores busy, % idle, % stolen by the
                hypervisor. Near all cores busy, the run was bound by them; --compare gives
                the peers' too

Workloads:
  burst     N one-shot triggers all due at T0 (Quartz's W1), on each count of --burst-nodes.
  steady    R triggers repeating every 1s for D, start times spread over the second (Quartz's
            W2); lateness per third of the run shows whether a backlog grows.
  failover  steady at --failover-rate on --failover-nodes schedulers; n1 is killed (SIGKILL) a
            third into the run. Reports dup, missing and the gap: the worst fire lateness of
            the fires due after the kill.
  intake    command intake: --intake-n schedule_job commands (one one-shot trigger due in a day
            each) (a) on the durable cmd subject, asynchronous publishing (--intake-window
            unacknowledged at most), until a CommandAccepted was seen for each, then (b) on the
            api subject with --intake-in-flight requests in flight; then River's InsertMany of
            as many jobs on the same server.

Side by side. --compare then runs the burst (--burst-n jobs due at one instant, a no-op job) on
River v0.51.1 (internal/bench/river, a module of its own: FetchCooldown 1ms, FetchPollInterval
10ms, MaxWorkers 100, ANALYZE before T0) and Quartz 2.3.2 clustered (internal/bench/quartz,
compiled with javac against Debian's libquartz2-java, run with libpostgresql-jdbc-java,
libc3p0-java and libslf4j-java; skipped with the install line when one is absent),
with --compare-procs processes each, on the same PostgreSQL, and prints the ratios: of Agate's
e2e/s, and of its applied/s (the schedulers' bookkeeping of every completion done too; a
peer's completion is its database row).

Rounds. --rounds N runs everything N times, one round after the other (with --compare, Agate's
workloads then the peers in each round), reports each round, then the medians over the rounds
with the range of e2e/s, Agate's ratio to each peer round by round, and the burst's rate on more
nodes against the fewest round by round. Even rounds run the burst's node counts in reverse
order, so that no count always runs first in its round. A ratio is marked * when the hypervisor
took 10 % or more of the cores' time in one of its two runs (/proc/stat's steal), and the median
of the unmarked ones is given beside the median of all.

--profile DIR writes a CPU profile (--profile-seconds long, from T0) of every scheduler and
worker process of each workload through its HTTP listener (` + cli.HTTPAddrEnv + ` with ` + cli.PprofEnv + `=true),
and of nats-server through its --profile listener.
Progress goes to stderr; the report (markdown, or JSON with -o json) to stdout. Run nothing
else heavy on the machine while timing.`,
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
	f.StringSliceVar(&o.Workloads, "workloads", []string{"burst", "steady", "failover"}, "workloads to run, in order: "+strings.Join(bench.Workloads, ", "))
	f.StringVar(&o.DatabaseURL, "database-url", "", "use this PostgreSQL server (a URL to any database on it; the bench creates and drops its own databases) instead of starting a private one")
	f.StringVarP(&o.Output, "output", "o", "table", "output format: table (markdown) or json")
	f.IntVar(&o.BurstN, "burst-n", 20000, "burst: one-shot triggers due at T0")
	f.StringVar(&burstNodes, "burst-nodes", "2,4", "burst: scheduler process counts to run, comma-separated")
	f.IntVar(&o.SteadyRate, "steady-rate", 5000, "steady: triggers firing every 1 s, i.e. fires/s demanded")
	f.DurationVar(&o.SteadyDuration, "steady-duration", 30*time.Second, "steady: how long each trigger repeats")
	f.StringVar(&steadyNodes, "steady-nodes", "2", "steady: scheduler process counts to run, comma-separated")
	f.IntVar(&o.FailoverRate, "failover-rate", 1000, "failover: fires/s demanded while one scheduler is killed")
	f.DurationVar(&o.FailoverDuration, "failover-duration", 45*time.Second, "failover: how long each trigger repeats (n1 is killed after a third; recovery takes up to 2 × check-in + 7.5 s)")
	f.IntVar(&o.FailoverNodes, "failover-nodes", 2, "failover: scheduler processes (at least 2)")
	f.BoolVar(&o.Compare, "compare", false, "after Agate's workloads, run the same burst (--burst-n) on River v0.51.1 (internal/bench/river, fetched by go) and, when Java and Debian's libquartz2-java (with its JDBC, pool and logging packages: see --help) are installed, on Quartz 2.3.2 clustered (internal/bench/quartz), on the same PostgreSQL, and print the ratios")
	f.IntVar(&o.CompareProcs, "compare-procs", 2, "--compare: River worker processes and Quartz scheduler JVMs")
	f.IntVar(&o.IntakeN, "intake-n", 20000, "intake: schedule_job commands per measurement")
	f.StringVar(&intakeNodes, "intake-nodes", "1,2,4", "intake: scheduler process counts to run, comma-separated")
	f.IntVar(&o.IntakeWindow, "intake-window", 1000, "intake: cmd path, commands published and not yet acknowledged by JetStream at most")
	f.IntVar(&o.IntakeInFlight, "intake-in-flight", 64, "intake: api path, requests in flight")
	f.BoolVar(&o.IntakeRiver, "intake-river", true, "intake: measure River v0.51.1's InsertMany on the same server (internal/bench/river --mode insert, fetched by go)")
	f.IntVar(&o.TriggersPerCommand, "triggers-per-command", 1, "triggers (of one job) per schedule_job command while scheduling (at most 100)")
	f.IntVar(&o.InFlight, "in-flight", 64, "schedule_job requests in flight while scheduling")
	f.IntVar(&o.Workers, "workers", 2, "worker processes per workload")
	f.IntVar(&o.Concurrency, "concurrency", 200, "jobs each worker runs at once (worker --concurrency)")
	f.Int32Var(&o.PoolSize, "pool-size", 0, "PostgreSQL connections per scheduler (pool_max_conns in its DATABASE_URL); 0 = the scheduler's default")
	f.StringVar(&o.LockMode, "lock-mode", "partitioned", "scheduler --lock-mode: global (Quartz-exact) or partitioned")
	f.IntVar(&o.Partitions, "partitions", node.PartitionsDefault, "scheduler --partitions with --lock-mode partitioned")
	f.IntVar(&o.PartitionsAtOnce, "partitions-at-once", node.PartitionsAtOnceDefault, "scheduler --partitions-at-once: transactions in different lock partitions each of a node's loops runs at once")
	f.DurationVar(&o.Lead, "lead", 0, "time from the start of scheduling to T0; 0 = 3s + 3 × the time the commands take at the calibrated rate")
	f.DurationVar(&o.Timeout, "timeout", 60*time.Second, "per workload: how long after its last due time to wait for completions")
	f.StringVar(&o.FiresOut, "fires-out", "", "write every fire of each workload (scheduled time after T0, fire and published lateness, node) as CSV into this directory")
	f.StringVar(&o.Profile, "profile", "", "write CPU profiles of every scheduler, worker and nats-server process into this directory (from T0; intake: per measurement)")
	f.IntVar(&o.ProfileSeconds, "profile-seconds", 5, "length of each CPU profile")
	f.BoolVar(&o.KeepDatabases, "keep-databases", false, "do not drop each workload's database when it ends (to look at them afterwards with --database-url); dropped, they leave autovacuum nothing to clean under the next workload")
	f.StringSliceVar(&o.PGSet, "pg-set", nil, "diagnostics: ALTER DATABASE <workload db> SET name = 'value' before the nodes connect, e.g. enable_nestloop=off (repeatable)")
	f.IntVar(&o.Rounds, "rounds", 1, fmt.Sprintf("run the workloads (and --compare's peers) this many times, one round after the other, then report each round and the medians (at most %d): the machine's speed drifts between runs, and a comparison holds within a round", bench.MaxRounds))
	f.BoolVarP(&o.Verbose, "verbose", "v", false, "run the schedulers and workers with --log-level info (their logs are in the temporary directory)")
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
