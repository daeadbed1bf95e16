// Command river runs River v0.51.1 (riverpgxv5) on a PostgreSQL database as the peer of two of
// agatebench's workloads, and prints one JSON object:
//
//   - --mode insert: N jobs inserted by InsertMany in batches, one transaction per batch, by C
//     goroutines at once (the peer of the intake workload);
//   - --mode burst: N jobs all scheduled at one instant T0, run by a no-op worker in --procs
//     processes of this binary (--mode worker, started by burst itself); see burst.go.
//
// It is a module of its own so that River is no dependency of Agate: agatebench builds it with
// `go build` in this directory (the first build downloads River from the Go module proxy).
//
//	go run . --mode insert --database-url postgres://… --n 20000 --batch 1000 --concurrency 2
//	go run . --mode burst --database-url postgres://… --n 20000 --procs 2 --lead 5s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverVersion is the River release go.mod requires.
const riverVersion = "v0.51.1"

// benchArgs is the job kind inserted by the insert mode; no worker runs it.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "agatebench_intake" }

type insertResult struct {
	River       string  `json:"river"`
	Jobs        int     `json:"jobs"`
	Batch       int     `json:"batch"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	JobsPerSec  float64 `json:"jobsPerSec"`
}

func main() {
	mode := flag.String("mode", "insert", "insert, burst, or worker (a burst's child process)")
	url := flag.String("database-url", "", "PostgreSQL database (River's tables are created in it)")
	n := flag.Int("n", 20000, "jobs to insert")
	batch := flag.Int("batch", 1000, "jobs per InsertMany call (one transaction)")
	conc := flag.Int("concurrency", 2, "InsertMany calls at once")
	procs := flag.Int("procs", 2, "burst: worker processes, each one River client")
	lead := flag.Duration("lead", 5*time.Second, "burst: from the start of the insert to T0, when every job is due")
	timeout := flag.Duration("timeout", 2*time.Minute, "burst: how long after T0 to wait for every job to complete")
	out := flag.String("out", "", "worker: file its records are written to when it stops")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "river: --database-url is required")
		os.Exit(2)
	}
	ctx := context.Background()
	var err error
	switch *mode {
	case "insert":
		err = runInsert(ctx, *url, *n, *batch, *conc)
	case "burst":
		err = runBurst(ctx, burstConfig{url: *url, n: *n, procs: *procs, batch: *batch, conc: *conc, lead: *lead, timeout: *timeout})
	case "worker":
		err = runWorker(ctx, *url, *out)
	default:
		err = fmt.Errorf("unknown --mode %q: use insert or burst", *mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "river %s: %v\n", *mode, err)
		os.Exit(1)
	}
}

// migrate creates or updates River's tables.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating River's tables: %w", err)
	}
	return nil
}

// insertMany inserts n jobs made by mk, batch per InsertMany call, conc calls at once, and
// returns the inserted jobs' ids.
func insertMany(ctx context.Context, client *river.Client[pgx.Tx], n, batch, conc int, mk func(i int) river.InsertManyParams) ([]int64, error) {
	type span struct{ from, to int }
	spans := make(chan span)
	ids := make([]int64, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range conc {
		wg.Go(func() {
			for s := range spans {
				params := make([]river.InsertManyParams, 0, s.to-s.from)
				for i := s.from; i < s.to; i++ {
					params = append(params, mk(i))
				}
				res, err := client.InsertMany(ctx, params)
				if err != nil {
					mu.Lock()
					firstErr = keepFirst(firstErr, fmt.Errorf("InsertMany: %w", err))
					mu.Unlock()
					continue
				}
				for j, r := range res {
					ids[s.from+j] = r.Job.ID
				}
			}
		})
	}
	for from := 0; from < n; from += batch {
		spans <- span{from, min(from+batch, n)}
	}
	close(spans)
	wg.Wait()
	return ids, firstErr
}

// keepFirst is a unless it is nil.
func keepFirst(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func runInsert(ctx context.Context, url string, n, batch, conc int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrate(ctx, pool); err != nil {
		return err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{}) // insert-only: no queues, no workers
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := insertMany(ctx, client, n, batch, conc, func(i int) river.InsertManyParams {
		return river.InsertManyParams{Args: benchArgs{N: i}}
	}); err != nil {
		return err
	}
	took := time.Since(start)
	return json.NewEncoder(os.Stdout).Encode(insertResult{River: riverVersion, Jobs: n, Batch: batch, Concurrency: conc,
		Seconds: took.Seconds(), JobsPerSec: float64(n) / took.Seconds()})
}
