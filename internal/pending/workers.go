package pending

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
)

// WorkerConsumer is the state of the workers' durable consumer of one job type on the FIRED
// stream (events.WorkerDurable): what JetStream knows of the workers of that type. Workers of a
// type share the consumer, so it counts them together, not one by one.
type WorkerConsumer struct {
	JobType string `json:"jobType"`
	// Waiting is how many pull requests wait for fires: workers asking for work now.
	Waiting int `json:"waiting"`
	// InFlight is how many fires were delivered and not acknowledged yet: runs in progress.
	InFlight int `json:"inFlight"`
	// Pending is how many fires wait in the stream, not delivered yet.
	Pending uint64 `json:"pending"`
	// LastDelivered is when a worker last received a fire (nil: never).
	LastDelivered *time.Time `json:"lastDelivered,omitempty"`
}

func workerConsumer(info *jetstream.ConsumerInfo) WorkerConsumer {
	w := WorkerConsumer{JobType: strings.TrimPrefix(info.Name, events.WorkerDurablePrefix), Waiting: info.NumWaiting,
		InFlight: info.NumAckPending, Pending: info.NumPending, LastDelivered: info.Delivered.Last}
	if w.LastDelivered != nil {
		t := w.LastDelivered.UTC()
		w.LastDelivered = &t
	}
	return w
}

// WorkerConsumers lists the workers' consumers of namespace ns, by job type: one paged request
// for all of them. None before the FIRED stream exists.
func WorkerConsumers(ctx context.Context, js jetstream.JetStream, ns string) ([]WorkerConsumer, error) {
	var out []WorkerConsumer
	if err := eachConsumer(ctx, js, events.StreamFired(ns), events.WorkerDurablePrefix, func(info *jetstream.ConsumerInfo) {
		out = append(out, workerConsumer(info))
	}); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b WorkerConsumer) int { return strings.Compare(a.JobType, b.JobType) })
	return out, nil
}

// WorkerConsumerOf is the workers' consumer of one job type; ok is false when no worker of that
// type ever started (the consumer does not exist).
func WorkerConsumerOf(ctx context.Context, js jetstream.JetStream, ns, jobType string) (w WorkerConsumer, ok bool, err error) {
	c, err := js.Consumer(ctx, events.StreamFired(ns), events.WorkerDurable(jobType))
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return WorkerConsumer{JobType: jobType}, false, nil
	}
	if err != nil {
		return WorkerConsumer{}, false, fmt.Errorf("looking up the workers' consumer of job type %s: %w", jobType, err)
	}
	return workerConsumer(c.CachedInfo()), true, nil
}
