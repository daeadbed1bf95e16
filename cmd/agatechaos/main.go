// Command agatechaos runs Agate's chaos suite (internal/chaos): schedulers, workers, nats-server
// and PostgreSQL as separate processes under load while a seeded injector kills, stops and
// restarts them; then it checks that no fire was lost or doubled. Exit status 1 when an invariant
// broke.
//
//	go run ./cmd/agatechaos --duration 20m
//	go run ./cmd/agatechaos --seed 42 --duration 2m --faults-every 4s
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/chaos"
	"github.com/agatesched/agate/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := 0
	cmd := rootCommand(&code)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agatechaos:", err)
		code = 2
	}
	stop()
	os.Exit(code)
}

func rootCommand(code *int) *cobra.Command {
	var cfg chaos.Config
	var out, logLevel string
	cmd := &cobra.Command{
		Use:   "agatechaos",
		Short: "Run Agate's chaos suite: faults under load, then check that no fire was lost or doubled",
		Long: `agatechaos starts PostgreSQL (fsync on), nats-server, schedulers and workers as separate
processes, schedules a steady load of repeating, one-shot and non-concurrent triggers through
the api subject, and for --duration injects faults chosen by --seed: kill -9 and SIGTERM of a
scheduler or worker (restarted), SIGSTOP of a scheduler past the check-in grace then SIGCONT,
restart of nats-server, pg_ctl stop -m immediate and start, and new scheduler nodes.
Then it waits for quiescence, reads the event log and prints the invariants: fires due, fired,
lost, doubled, overlapping non-concurrent executions, fires without a terminal event, duplicate
executions (allowed), and failover times. Exit status 1 when an invariant broke, 2 when the
suite could not run. Processes' logs stay in the run directory named in the report.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := cli.NewLogger(os.Stderr, logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = log
			cfg.Defaults()
			cfg.CommandLine = cfg.Replay()
			fmt.Fprintf(os.Stderr, "agatechaos: seed %d\n", cfg.Seed)
			w := io.Writer(os.Stdout)
			if out != "" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = io.MultiWriter(os.Stdout, f)
			}
			rep, err := chaos.Run(cmd.Context(), cfg, w)
			if err != nil {
				return fmt.Errorf("%w (seed %d)", err, cfg.Seed)
			}
			if rep.Failed() {
				*code = 1
			}
			return nil
		},
	}
	f := cmd.Flags()
	bind := func(name, env string) { cli.BindEnv(f, name, env) }
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the load and the fault plan (0: random, printed)")
	bind("seed", "AGATE_CHAOS_SEED")
	f.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "load window; faults are injected inside it")
	bind("duration", "AGATE_CHAOS_DURATION")
	f.IntVar(&cfg.Schedulers, "schedulers", 3, "scheduler processes")
	f.IntVar(&cfg.Workers, "workers", 3, "worker processes")
	f.DurationVar(&cfg.FaultsEvery, "faults-every", 5*time.Second, "mean interval between faults")
	bind("faults-every", "AGATE_CHAOS_FAULTS_EVERY")
	f.DurationVar(&cfg.CheckinInterval, "checkin-interval", time.Second, "schedulers' --checkin-interval")
	f.DurationVar(&cfg.MisfireThreshold, "misfire-threshold", 10*time.Minute, "schedulers' --misfire-threshold (above any outage of the run)")
	f.DurationVar(&cfg.WorkerAckWait, "ack-wait", 5*time.Second, "workers' --ack-wait")
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", 2*time.Minute, "longest wait for quiescence after the window")
	f.IntVar(&cfg.RepeatingPerSecond, "repeating", 2, "repeating triggers (every 200-500 ms, 5-30 s) scheduled per second")
	f.IntVar(&cfg.OneShotsPerSecond, "one-shots", 8, "one-shot triggers scheduled per second")
	f.IntVar(&cfg.NonconcurrentEvery, "nonconcurrent-every", 4, "a non-concurrent job (3 triggers, 300 ms sleeps) every this many seconds")
	f.StringVar(&cfg.Dir, "dir", "", "run directory for logs and the JetStream store (default: a new temporary directory)")
	f.StringVar(&cfg.BinDir, "bin-dir", "", "use prebuilt scheduler, worker and nats-server binaries from here instead of building them")
	f.StringVar(&out, "out", "", "also write the report to this file")
	f.StringVar(&logLevel, "log-level", "info", "progress messages on stderr: debug, info, warn or error")
	cli.Setup(cmd, "agatechaos")
	return cmd
}
