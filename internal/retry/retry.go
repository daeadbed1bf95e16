// Package retry says how long to wait before trying again, so that every loop that meets a
// failure (a database restart, a NATS outage, a job that failed) backs off the same way.
package retry

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Delay is the wait before attempt+1 (attempt counts from 1): base doubled per attempt, capped
// at max, with ±10% jitter so that many loops failing together do not retry in step.
func Delay(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	jitter := time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return d + jitter
}

// Do runs fn until it succeeds, ctx ends, or it fails with an error that retryable refuses (nil
// retryable: every error is worth another try). Between tries it waits Delay(attempt, 100ms, 5s);
// the first retryable failure is logged once, as "<what> failed; retrying".
func Do(ctx context.Context, log *slog.Logger, what string, retryable func(error) bool, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		switch {
		case err == nil:
			if attempt > 1 {
				log.InfoContext(ctx, what+" succeeded after retrying", slog.Int("attempts", attempt))
			}
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case retryable != nil && !retryable(err):
			return err
		case attempt == 1:
			log.WarnContext(ctx, what+" failed; retrying", slog.Any("error", err))
		}
		t := time.NewTimer(Delay(attempt, 100*time.Millisecond, 5*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
