package natsconn

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestRedact(t *testing.T) {
	got := Redact("nats://scheduler:s3cret@nats-1:4222, nats://tok3n@nats-2:4222,nats://nats-3:4222")
	want := "nats://redacted@nats-1:4222,nats://redacted@nats-2:4222,nats://nats-3:4222"
	if got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
}

// A request NATS did not answer is worth waiting out; a refusal is not.
func TestNotAnswering(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("creating consumer: %w", context.DeadlineExceeded), true},
		{nats.ErrNoResponders, true},
		{nats.ErrTimeout, true},
		{jetstream.ErrNoStreamResponse, true},
		{nats.ErrConnectionReconnecting, true},
		{jetstream.ErrStreamNotFound, false},
		{errors.New("consumer config invalid"), false},
	} {
		if got := NotAnswering(tc.err); got != tc.want {
			t.Errorf("NotAnswering(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
