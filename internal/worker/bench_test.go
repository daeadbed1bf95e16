package worker_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/worker"
)

// BenchmarkNoopJobs measures one worker's end-to-end rate for jobs that do nothing: fetch, run,
// publish the completion (waiting for its PubAck), ack. The b.N fires are published first, then
// the clock runs until every completion has arrived.
//
//	go test ./internal/worker -run '^$' -bench NoopJobs -benchtime 20000x
func BenchmarkNoopJobs(b *testing.B) {
	for _, conc := range []int{10, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			e := newEnv(b)
			outcomes := e.watchDone()
			for range b.N {
				e.fire(worker.TypeNoop, `{}`, "")
			}
			reg := worker.NewRegistry()
			worker.RegisterBuiltins(reg, worker.BuiltinOptions{})
			cfg := worker.Config{Namespace: e.ns, InstanceID: "bench", Concurrency: conc, Logger: slog.New(slog.DiscardHandler)}
			b.ResetTimer()
			e.startWorker(e.js, cfg, reg)
			for range b.N {
				select {
				case o := <-outcomes:
					if o.typ != events.TypeJobCompleted {
						b.Fatalf("outcome %s", o.typ)
					}
				case <-time.After(waitFor):
					b.Fatal("completions stopped arriving")
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
