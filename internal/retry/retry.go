// Package retry says how long to wait before trying again, so that every loop that meets a
// failure (a database restart, a NATS outage, a job that failed) backs off the same way.
package retry

import (
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
