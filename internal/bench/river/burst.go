package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// The burst workload: N jobs all scheduled at T0, run by a no-op worker in --procs processes.
//
// Every worker process is one River client at River's fastest settings for this load: the
// default queue with MaxWorkers 100, FetchCooldown 1 ms (River's minimum), FetchPollInterval
// 10 ms. The parent waits until each says READY and leader election had time, inserts the jobs
// with InsertMany (ScheduledAt T0 = insert start + --lead), runs ANALYZE on river_job before T0
// and polls the count of completed jobs every 10 ms. The workers record every execution (job id,
// scheduled_at, start, end) and write their records when SIGTERM stops them.
//
// For agatebench, lines starting with @ on stderr mark the moments it samples CPU time at:
// "@pids P…" (this process and the workers), "@t0 UNIXMS" (before T0) and "@done" (all
// completed, or the timeout).

type burstConfig struct {
	url         string
	n, procs    int
	batch, conc int
	lead        time.Duration
	timeout     time.Duration
}

// burstArgs is the burst workload's job kind.
type burstArgs struct {
	I int `json:"i"`
}

func (burstArgs) Kind() string { return "agatebench_burst" }

type burstResult struct {
	River      string  `json:"river"`
	Jobs       int     `json:"jobs"`
	Procs      int     `json:"procs"`
	Seconds    float64 `json:"seconds"` // T0 → the poll saw every job completed
	JobsPerSec float64 `json:"jobsPerSec"`
	// Lateness of each execution: its start − the job's scheduled_at.
	P50Ms      float64 `json:"p50Ms"`
	P99Ms      float64 `json:"p99Ms"`
	MaxMs      float64 `json:"maxMs"`
	Duplicates int     `json:"duplicates"` // executions beyond the first of a job
	Missing    int     `json:"missing"`    // jobs inserted and never run
	PerProcess []int   `json:"perProcess"` // executions per worker process
	// InsertSeconds is how long InsertMany of the N jobs took (before T0, not timed).
	InsertSeconds float64 `json:"insertSeconds"`
	TimedOut      bool    `json:"timedOut"`
}

// record is one execution, times in Unix nanoseconds.
type record struct {
	id                    int64
	scheduled, start, end int64
}

func runBurst(ctx context.Context, c burstConfig) error {
	if c.n <= 0 || c.procs <= 0 || c.batch <= 0 || c.conc <= 0 || c.lead <= 0 || c.timeout <= 0 {
		return errors.New("--n, --procs, --batch, --concurrency, --lead and --timeout must be positive")
	}
	pool, err := pgxpool.New(ctx, c.url)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "agatebench-river-burst-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Start the workers and wait until each runs its client.
	workers := make([]*exec.Cmd, c.procs)
	ready := make(chan error, c.procs)
	defer func() {
		for _, w := range workers {
			if w != nil && w.ProcessState == nil {
				_ = w.Process.Kill()
				_ = w.Wait()
			}
		}
	}()
	pids := []string{strconv.Itoa(os.Getpid())}
	for i := range workers {
		w := exec.Command(exe, "--mode", "worker", "--database-url", c.url, "--out", filepath.Join(dir, fmt.Sprintf("w%d.rec", i)))
		w.Stderr = os.Stderr
		w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdout, err := w.StdoutPipe()
		if err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("starting worker process: %w", err)
		}
		workers[i] = w
		pids = append(pids, strconv.Itoa(w.Process.Pid))
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if sc.Text() == "READY" {
					ready <- nil
					_, _ = io.Copy(io.Discard, stdout)
					return
				}
			}
			ready <- fmt.Errorf("worker process %d exited before it was ready", i+1)
		}()
	}
	for range workers {
		select {
		case err := <-ready:
			if err != nil {
				return err
			}
		case <-time.After(60 * time.Second):
			return errors.New("worker processes not ready after 60s")
		}
	}
	// One of the clients must be elected leader: its job scheduler makes scheduled jobs available.
	time.Sleep(2 * time.Second)
	fmt.Fprintln(os.Stderr, "@pids", strings.Join(pids, " "))

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{}) // insert-only
	if err != nil {
		return err
	}
	insertStart := time.Now()
	t0 := insertStart.Add(c.lead)
	fmt.Fprintln(os.Stderr, "@t0", t0.UnixMilli())
	ids, err := insertMany(ctx, client, c.n, c.batch, c.conc, func(i int) river.InsertManyParams {
		return river.InsertManyParams{Args: burstArgs{I: i}, InsertOpts: &river.InsertOpts{ScheduledAt: t0}}
	})
	if err != nil {
		return err
	}
	insertTook := time.Since(insertStart)
	// Without fresh statistics PostgreSQL keeps the generic plan it made on the empty table;
	// a user's table is not empty.
	if _, err := pool.Exec(ctx, "analyze river_job"); err != nil {
		return fmt.Errorf("analyze river_job: %w", err)
	}
	if late := time.Since(t0); late > 0 {
		return fmt.Errorf("inserting %d jobs and ANALYZE ended %s after T0: raise --lead", c.n, late.Round(time.Millisecond))
	}

	// Poll until every job is completed.
	var completed int
	timedOut := false
	deadline := t0.Add(c.timeout)
	for {
		if err := pool.QueryRow(ctx, "select count(*) from river_job where state = 'completed'").Scan(&completed); err != nil {
			return fmt.Errorf("counting completed jobs: %w", err)
		}
		if completed >= c.n {
			break
		}
		if time.Now().After(deadline) {
			timedOut = true
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	doneAt := time.Now()
	fmt.Fprintln(os.Stderr, "@done")
	if timedOut {
		fmt.Fprintf(os.Stderr, "river burst: only %d of %d jobs completed %s after T0\n", completed, c.n, c.timeout)
	}

	// Stop the workers; each writes its records as it exits.
	var recs [][]record
	for i, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- w.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("worker process %d: %w", i+1, err)
			}
		case <-time.After(60 * time.Second):
			return fmt.Errorf("worker process %d did not stop within 60s of SIGTERM", i+1)
		}
		r, err := readRecords(filepath.Join(dir, fmt.Sprintf("w%d.rec", i)))
		if err != nil {
			return fmt.Errorf("worker process %d's records: %w", i+1, err)
		}
		recs = append(recs, r)
	}

	res := summarize(ids, recs)
	res.River, res.Jobs, res.Procs = riverVersion, c.n, c.procs
	res.Seconds = doneAt.Sub(t0).Seconds()
	res.JobsPerSec = float64(c.n) / res.Seconds
	res.InsertSeconds = insertTook.Seconds()
	res.TimedOut = timedOut
	return json.NewEncoder(os.Stdout).Encode(res)
}

// summarize computes lateness, duplicates and missing jobs from the workers' records.
func summarize(ids []int64, recs [][]record) burstResult {
	var res burstResult
	runs := make(map[int64]int, len(ids))
	var late []float64
	for _, rs := range recs {
		res.PerProcess = append(res.PerProcess, len(rs))
		for _, r := range rs {
			runs[r.id]++
			late = append(late, float64(r.start-r.scheduled)/1e6)
		}
	}
	for _, id := range ids {
		switch k := runs[id]; {
		case k == 0:
			res.Missing++
		case k > 1:
			res.Duplicates += k - 1
		}
	}
	slices.Sort(late)
	res.P50Ms, res.P99Ms = quantile(late, 0.50), quantile(late, 0.99)
	if len(late) > 0 {
		res.MaxMs = late[len(late)-1]
	}
	return res
}

// quantile is the nearest-rank quantile of sorted values (0 when empty).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// recorder keeps a worker process's executions.
type recorder struct {
	mu   sync.Mutex
	recs []record
}

// noopWorker runs a burst job: it does nothing but record the execution.
type noopWorker struct {
	river.WorkerDefaults[burstArgs]
	rec *recorder
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[burstArgs]) error {
	start := time.Now()
	r := record{id: job.ID, scheduled: job.ScheduledAt.UnixNano(), start: start.UnixNano()}
	r.end = time.Now().UnixNano()
	w.rec.mu.Lock()
	w.rec.recs = append(w.rec.recs, r)
	w.rec.mu.Unlock()
	return nil
}

// runWorker runs one River client until SIGTERM, then writes its records to out.
func runWorker(ctx context.Context, url, out string) error {
	if out == "" {
		return errors.New("--out is required")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer pool.Close()
	rec := &recorder{}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{rec: rec})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 10 * time.Millisecond,
		Workers:           workers,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	stop, cancel := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("starting the River client: %w", err)
	}
	fmt.Println("READY")
	<-stop.Done()
	stopCtx, cancelStop := context.WithTimeout(ctx, 30*time.Second)
	defer cancelStop()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("stopping the River client: %w", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return writeRecords(out, rec.recs)
}

func writeRecords(path string, recs []record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, r := range recs {
		fmt.Fprintf(w, "%d %d %d %d\n", r.id, r.scheduled, r.start, r.end)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readRecords(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r record
		if _, err := fmt.Sscan(sc.Text(), &r.id, &r.scheduled, &r.start, &r.end); err != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}
