// Command riverinsert measures River's InsertMany on a PostgreSQL database, as the peer figure of
// agatebench's intake workload: N jobs inserted by InsertMany in batches, one transaction per
// batch, by C goroutines at once. It prints one JSON object.
//
// It is a module of its own so that River is no dependency of Agate: agatebench runs it with
// `go run .` in this directory (the first run downloads River from the Go module proxy).
//
//	go run . --database-url postgres://… --n 20000 --batch 1000 --concurrency 2
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// benchArgs is the job kind inserted; no worker runs it.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "agatebench_intake" }

type result struct {
	River       string  `json:"river"`
	Jobs        int     `json:"jobs"`
	Batch       int     `json:"batch"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	JobsPerSec  float64 `json:"jobsPerSec"`
}

func main() {
	url := flag.String("database-url", "", "PostgreSQL database (River's tables are created in it)")
	n := flag.Int("n", 20000, "jobs to insert")
	batch := flag.Int("batch", 1000, "jobs per InsertMany call (one transaction)")
	conc := flag.Int("concurrency", 2, "InsertMany calls at once")
	flag.Parse()
	if err := run(context.Background(), *url, *n, *batch, *conc); err != nil {
		fmt.Fprintln(os.Stderr, "riverinsert:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url string, n, batch, conc int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrating River's tables: %w", err)
	}
	client, err := river.NewClient(driver, &river.Config{}) // insert-only: no queues, no workers
	if err != nil {
		return err
	}
	batches := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for size := range batches {
				params := make([]river.InsertManyParams, size)
				for i := range params {
					params[i] = river.InsertManyParams{Args: benchArgs{N: i}}
				}
				if _, err := client.InsertMany(ctx, params); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		})
	}
	for left := n; left > 0; left -= batch {
		batches <- min(batch, left)
	}
	close(batches)
	wg.Wait()
	took := time.Since(start)
	if firstErr != nil {
		return firstErr
	}
	return json.NewEncoder(os.Stdout).Encode(result{River: "v0.51.1", Jobs: n, Batch: batch, Concurrency: conc,
		Seconds: took.Seconds(), JobsPerSec: float64(n) / took.Seconds()})
}
