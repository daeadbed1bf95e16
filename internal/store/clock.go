package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Clock bounds of a node (Quartz requires every node's clock to agree; Agate measures instead).
const (
	// ClockWarnOffset is the offset from the database clock worth a log line.
	ClockWarnOffset = 250 * time.Millisecond
	// clockMaxUncertainty is the largest half round trip a measurement may take to count.
	clockMaxUncertainty = 250 * time.Millisecond
	// clockMaxJump is how far the offset may move between two measurements before the node stops
	// claiming until a measurement confirms the new offset.
	clockMaxJump = time.Second
)

// Clock is a node's clock corrected by its measured offset from the database clock, so that a
// node whose clock runs ahead or behind still fires on time. Recovery measures it at each
// check-in; fire decisions read Now. A node whose offset cannot be measured, or just jumped,
// is not Synced and claims nothing until it is.
type Clock struct {
	local  func() time.Time
	offset atomic.Int64 // nanoseconds: database − local
	synced atomic.Bool
	seen   atomic.Bool // a measurement was taken
}

// NewClock corrects local (time.Now when nil). It is not Synced before its first measurement.
func NewClock(local func() time.Time) *Clock {
	if local == nil {
		local = time.Now
	}
	return &Clock{local: local}
}

// Now is the corrected time: the database clock as this node best knows it.
func (c *Clock) Now() time.Time { return c.local().Add(c.Offset()) }

// Offset is the last measured offset (database − local).
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Synced reports whether the offset is known and steady. A nil Clock is always synced.
func (c *Clock) Synced() bool { return c == nil || c.synced.Load() }

// Measurement is the result of one Measure.
type Measurement struct {
	Offset      time.Duration // database − local
	Uncertainty time.Duration // half the round trip
	Jumped      bool          // the offset moved by more than a second since the last measurement
}

// Measure reads the database clock and updates the offset. The node is synced after a
// measurement whose uncertainty is small and whose offset did not jump; otherwise it is not,
// until one is.
func (c *Clock) Measure(ctx context.Context, pool *pgxpool.Pool) (Measurement, error) {
	before := c.local()
	var db time.Time
	err := pool.QueryRow(ctx, "select clock_timestamp()").Scan(&db)
	after := c.local()
	if err != nil {
		c.synced.Store(false)
		return Measurement{}, fmt.Errorf("reading the database clock: %w", err)
	}
	rtt := after.Sub(before)
	m := Measurement{Offset: db.Sub(before.Add(rtt / 2)), Uncertainty: rtt / 2}
	if m.Uncertainty > clockMaxUncertainty {
		c.synced.Store(false)
		return m, fmt.Errorf("the database clock answered in %s, too slowly to measure this node's offset", rtt.Round(time.Millisecond))
	}
	old := c.Offset()
	c.offset.Store(int64(m.Offset))
	m.Jumped = c.seen.Swap(true) && (m.Offset-old > clockMaxJump || old-m.Offset > clockMaxJump)
	c.synced.Store(!m.Jumped)
	return m, nil
}
