package natsconn

import "testing"

func TestRedact(t *testing.T) {
	got := Redact("nats://scheduler:s3cret@nats-1:4222, nats://tok3n@nats-2:4222,nats://nats-3:4222")
	want := "nats://redacted@nats-1:4222,nats://redacted@nats-2:4222,nats://nats-3:4222"
	if got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
}
