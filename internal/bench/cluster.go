package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/chaos"
	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/events"
)

// cluster is the scheduler and worker processes of one workload, started from the built
// binaries with the flags a user would give them.
type cluster struct {
	ns         string
	schedulers []*proc
	workers    []*proc
	pprof      []pprofTarget // with --profile: each process's pprof listener
}

// pprofTarget is one process serving Go's profiles on its HTTP listener (--http with --pprof).
type pprofTarget struct{ name, addr string }

// migrate runs `scheduler migrate`, so that the nodes start on the same schema without racing.
func (b *bench) migrate(ctx context.Context, dbURL string) error {
	out, err := exec.CommandContext(ctx, filepath.Join(b.inf.bin, "scheduler"), "migrate", "--database-url", dbURL).CombinedOutput()
	if err != nil {
		return fmt.Errorf("scheduler migrate: %w\n%s", err, out)
	}
	return nil
}

// pprofEnv returns the environment that makes a process serve its profiles, when profiles are
// asked for.
func (b *bench) pprofEnv(c *cluster, name string) ([]string, error) {
	if b.o.Profile == "" {
		return nil, nil
	}
	port, err := chaos.FreePort()
	if err != nil {
		return nil, fmt.Errorf("finding a port for %s's profiles: %w", name, err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c.pprof = append(c.pprof, pprofTarget{name: name, addr: addr})
	return []string{cli.HTTPAddrEnv + "=" + addr, cli.PprofEnv + "=true"}, nil
}

// startSchedulers starts n `scheduler run` processes n1…nN on namespace ns.
func (b *bench) startSchedulers(c *cluster, dbURL string, n int) error {
	if b.o.PoolSize > 0 {
		// How a user sizes the pool: pgxpool's pool_max_conns in DATABASE_URL.
		u, err := url.Parse(dbURL)
		if err != nil {
			return fmt.Errorf("parsing database URL: %w", err)
		}
		q := u.Query()
		q.Set("pool_max_conns", strconv.Itoa(int(b.o.PoolSize)))
		u.RawQuery = q.Encode()
		dbURL = u.String()
	}
	level := "warn"
	if b.o.Verbose {
		level = "info"
	}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		env, err := b.pprofEnv(c, id)
		if err != nil {
			return err
		}
		p, err := startProc(filepath.Join(b.inf.bin, "scheduler"), filepath.Join(b.inf.dir, c.ns+"-"+id+".log"), env,
			"run", "--database-url", dbURL, "--nats-url", b.inf.natsURL, "--namespace", c.ns, "--instance-id", id,
			"--log-level", level, "--lock-mode", b.o.LockMode, "--partitions", strconv.Itoa(b.o.Partitions),
			"--partitions-at-once", strconv.Itoa(b.o.PartitionsAtOnce))
		if err != nil {
			return err
		}
		p.name = id
		c.schedulers = append(c.schedulers, p)
	}
	return nil
}

// startWorkers starts n `worker` processes w1…wN on namespace ns (the built-in noop job type).
func (b *bench) startWorkers(c *cluster, n int) error {
	level := "warn"
	if b.o.Verbose {
		level = "info"
	}
	for i := range n {
		id := fmt.Sprintf("w%d", i+1)
		env, err := b.pprofEnv(c, id)
		if err != nil {
			return err
		}
		p, err := startProc(filepath.Join(b.inf.bin, "worker"), filepath.Join(b.inf.dir, c.ns+"-"+id+".log"), env,
			"--nats-url", b.inf.natsURL, "--namespace", c.ns, "--instance-id", id, "--log-level", level,
			"--concurrency", strconv.Itoa(b.o.Concurrency))
		if err != nil {
			return err
		}
		p.name = id
		c.workers = append(c.workers, p)
	}
	return nil
}

// stop stops the workers, then the schedulers.
func (c *cluster) stop() {
	for _, p := range c.workers {
		p.stop()
	}
	for _, p := range c.schedulers {
		p.stop()
	}
}

// pids groups the processes whose CPU the report splits: postgres, nats-server, each scheduler
// and worker, and the bench.
func (b *bench) pids(c *cluster) map[string][]int {
	pids := map[string][]int{"nats-server": {b.inf.nats.pid()}, "bench": {os.Getpid()}}
	if p := b.inf.postgresPIDs(); p != nil {
		pids["postgres"] = p
	}
	for _, p := range c.schedulers {
		pids["scheduler "+p.name] = []int{p.pid()}
	}
	for _, p := range c.workers {
		pids["worker "+p.name] = []int{p.pid()}
	}
	return pids
}

// waitNodes waits until nodes scheduler processes have joined the cluster and one answers on
// the api subject. It reads scheduler_state once a poll: it runs before the measurement.
func waitNodes(ctx context.Context, nc *nats.Conn, dbURL, ns string, nodes int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var joined int
		err := conn.QueryRow(ctx, `select count(*) from scheduler_state where sched_name = $1`, ns).Scan(&joined)
		if err == nil && joined >= nodes {
			// An unknown command is answered (rejected) by any node without touching the database.
			msg, rerr := nc.RequestWithContext(ctx, events.Subjects(ns).API("ping"), []byte(`{"id":"ping"}`))
			if rerr == nil && len(msg.Data) > 0 {
				return nil
			}
			err = rerr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d scheduler processes not ready after 60s (last error: %v)", nodes, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitWorkers waits until the workers' durable consumer on the FIRED stream has n pull
// requests waiting, i.e. every worker process is fetching.
func waitWorkers(ctx context.Context, js jetstream.JetStream, ns string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var err error
	for {
		var c jetstream.Consumer
		if c, err = js.Consumer(ctx, events.StreamFired(ns), events.WorkerDurable("noop")); err == nil {
			var info *jetstream.ConsumerInfo
			if info, err = c.Info(ctx); err == nil && info.NumWaiting >= n {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d worker processes not fetching after 30s (last error: %v)", n, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitApplied waits until the schedulers' completion consumer (complete.DurableName) has nothing
// left to apply: every JobCompleted on the DONE stream was delivered to a node and acked, after
// its transaction committed. It returns when that was seen, or the zero time at the deadline.
func waitApplied(ctx context.Context, js jetstream.JetStream, ns string, deadline time.Time) time.Time {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var c jetstream.Consumer // looked up once; each poll then asks for its state alone
	for {
		if c == nil {
			c, _ = js.Consumer(ctx, events.StreamDone(ns), complete.DurableName)
		}
		if c != nil {
			if info, err := c.Info(ctx); err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
				return time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}
		case <-tick.C:
		}
	}
}
