package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/devenv/localpg"
	"github.com/agatesched/agate/internal/devenv/natsembed"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/worker"
)

// devExample is the example schedule dev mode loads. Its command id is fixed, so a second run
// is answered "already applied" and picks up where the first left off.
const devExample = `{
  "id": "dev-example-v1",
  "job": {"group": "examples", "name": "heartbeat", "type": "log", "data": {"message": "hello from Agate"}},
  "triggers": [{"group": "examples", "name": "every-5s", "simple": {"interval": "5s", "repeatCount": -1}}]
}`

const devExample2 = `{
  "id": "dev-example-v1-cron",
  "job": {"group": "examples", "name": "nap", "type": "sleep", "data": {"duration": "1500ms"}, "nonconcurrent": true},
  "triggers": [{"group": "examples", "name": "every-10s", "cron": {"expression": "0/10 * * * * ?", "timeZone": "UTC"}},
               {"group": "examples", "name": "every-3s", "simple": {"interval": "3s", "repeatCount": -1}}]
}`

func devCommand() *cobra.Command {
	o := &options{}
	var dataDir string
	var natsPort int
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "All-in-one development cluster: embedded NATS JetStream, local PostgreSQL, one node, one worker",
		Long: `Starts everything Agate needs on this machine and loads an example schedule:
  - NATS with JetStream, embedded, storing in <data-dir>/nats (port --nats-port, or a free one);
  - PostgreSQL from the machine's binaries, data in <data-dir>/postgres, unless DATABASE_URL is set
    (scripts/ensure-postgres.sh installs the binaries when they are missing);
  - one scheduler node and one worker with the built-in job types (noop, sleep, log, http).
Lines show jobs being scheduled, fired, run and completed. Ctrl-C stops everything cleanly; running
it again picks up where it left off.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), o, dataDir, natsPort)
		},
	}
	addNodeFlags(cmd, o)
	cmd.Flags().StringVar(&dataDir, "data-dir", env("AGATE_DEV_DIR", ".agate-dev"), "where dev mode keeps PostgreSQL and JetStream data (env AGATE_DEV_DIR)")
	cmd.Flags().IntVar(&natsPort, "nats-port", 4222, "port of the embedded NATS server (a free one if taken)")
	return cmd
}

func runDev(ctx context.Context, o *options, dataDir string, natsPort int) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		log.Info("starting PostgreSQL", slog.String("data", filepath.Join(dataDir, "postgres")))
		pg, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(dataDir, "postgres"), Fsync: true, Logger: log})
		if err != nil {
			return fmt.Errorf("starting PostgreSQL (run scripts/ensure-postgres.sh, or set DATABASE_URL): %w", err)
		}
		defer func() {
			if err := pg.Stop(context.WithoutCancel(ctx)); err != nil {
				log.Warn("stopping PostgreSQL", slog.Any("error", err))
			}
		}()
		if dbURL, err = ensureDatabase(ctx, pg, "agate"); err != nil {
			return err
		}
	}
	if !portFree(natsPort) {
		natsPort = -1
	}
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(dataDir, "nats"), Port: natsPort})
	if err != nil {
		return fmt.Errorf("starting embedded NATS: %w", err)
	}
	defer ns.Shutdown()
	log.Info("embedded NATS with JetStream is up", slog.String("url", ns.URL()))

	pool, err := store.Open(ctx, dbURL, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, err := nats.Connect(ns.URL(), nats.Name("agate-dev"))
	if err != nil {
		return fmt.Errorf("connecting to embedded NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}

	o.node.Logger = log
	o.node.JobTypes = append(append([]string{}, command.BuiltinJobTypes...), o.jobTypes...)
	if err := o.node.Validate(); err != nil {
		return err
	}
	reg := worker.NewRegistry()
	worker.RegisterBuiltins(reg, worker.BuiltinOptions{})
	w, err := worker.New(worker.Config{Namespace: o.node.Namespace, InstanceID: o.node.InstanceID + "-worker",
		Logger: log.With(slog.String("worker", o.node.InstanceID+"-worker"))}, js, reg)
	if err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return node.Run(gctx, o.node, pool, nc) })
	g.Go(func() error { return w.Run(gctx) })
	g.Go(func() error { return tail(gctx, nc, o.node.Namespace, log) })
	g.Go(func() error { return loadExamples(gctx, nc, o.node.Namespace, log) })
	log.Info("Agate dev cluster running; Ctrl-C stops it", slog.String("nats", ns.URL()), slog.String("namespace", o.node.Namespace))
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("Agate dev cluster stopped")
	return err
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ensureDatabase creates the dev database on first run.
func ensureDatabase(ctx context.Context, pg *localpg.Cluster, name string) (string, error) {
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connecting to local PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `select exists (select 1 from pg_database where datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("checking for database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", fmt.Errorf("creating database %s: %w", name, err)
		}
	}
	return pg.URL(name), nil
}

// loadExamples sends the example schedule through the request-reply API, as a producer would,
// retrying until the node answers.
func loadExamples(ctx context.Context, nc *nats.Conn, ns string, log *slog.Logger) error {
	for _, body := range []string{devExample, devExample2} {
		for {
			reply, err := nc.RequestWithContext(ctx, events.Subjects(ns).API("schedule_job"), []byte(body))
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				time.Sleep(200 * time.Millisecond) // the node is still starting
				continue
			}
			var out command.Outcome
			_ = json.Unmarshal(reply.Data, &out)
			if out.OK {
				log.Info("example schedule loaded", slog.String("command_id", out.CommandID))
			} else if out.Error != nil {
				log.Info("example schedule not loaded", slog.String("reason", out.Error.Message))
			}
			break
		}
	}
	return nil
}

// tail prints one readable line per lifecycle event, so a developer sees jobs being scheduled,
// fired, run and completed. It listens on core NATS, where the outbox sweep's republished copies
// (dropped by JetStream's de-duplication) are visible too, so it skips ids it has seen.
func tail(ctx context.Context, nc *nats.Conn, ns string, log *slog.Logger) error {
	seen := map[string]time.Time{}
	sub, err := nc.Subscribe("agate."+ns+".>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, ".api.") || strings.Contains(m.Subject, ".cmd.") {
			return
		}
		var env events.Envelope
		if json.Unmarshal(m.Data, &env) != nil {
			return
		}
		if _, dup := seen[env.ID]; dup {
			return
		}
		now := time.Now()
		seen[env.ID] = now
		if len(seen) > 10000 {
			for id, at := range seen {
				if now.Sub(at) > events.DuplicateWindow {
					delete(seen, id)
				}
			}
		}
		var d struct {
			FireID        string           `json:"fireId"`
			Job           events.JobRef    `json:"job"`
			Trigger       events.Key       `json:"trigger"`
			ScheduledTime time.Time        `json:"scheduledTime"`
			StartedTime   time.Time        `json:"startedTime"`
			FinishedTime  time.Time        `json:"finishedTime"`
			Worker        string           `json:"worker"`
			Error         *events.JobError `json:"error"`
			CommandID     string           `json:"commandId"`
			NextFireTime  *time.Time       `json:"nextFireTime"`
		}
		_ = json.Unmarshal(env.Data, &d)
		job := d.Job.Group + "." + d.Job.Name
		switch env.Type {
		case events.TypeTriggerScheduled:
			log.Info("scheduled", slog.String("trigger", d.Trigger.Group+"."+d.Trigger.Name), slog.Any("next_fire", d.NextFireTime))
		case events.TypeJobFired:
			log.Info("fired", slog.String("job", job), slog.String("trigger", d.Trigger.Group+"."+d.Trigger.Name),
				slog.String("scheduled", d.ScheduledTime.Format(time.TimeOnly+".000")), slog.String("fire", d.FireID))
		case events.TypeJobCompleted:
			log.Info("completed", slog.String("job", job), slog.String("fire", d.FireID),
				slog.Duration("ran", d.FinishedTime.Sub(d.StartedTime).Round(time.Millisecond)),
				slog.Duration("late", d.StartedTime.Sub(d.ScheduledTime).Round(time.Millisecond)))
		case events.TypeJobFailed:
			log.Warn("failed", slog.String("job", job), slog.String("fire", d.FireID), slog.Any("error", d.Error))
		case events.TypeCommandRejected:
			log.Warn("command rejected", slog.String("command_id", d.CommandID))
		}
	})
	if err != nil {
		return fmt.Errorf("subscribing to events: %w", err)
	}
	<-ctx.Done()
	return sub.Unsubscribe()
}
