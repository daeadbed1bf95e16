// Package client is the Go client of Agate for producers and operators: typed commands (every
// command of docs/contract.md) and queries sent over NATS request-reply, a Publisher that sends
// many commands asynchronously on the durable command subjects, and a reader of the events.
//
// Events reads the namespace's events (CloudEvents, docs/contract.md "Events") from its
// JetStream streams: those stored, in the order they were stored, and with Follow those to come.
//
// A Client needs only a NATS connection with a producer's rights on the namespace:
//
//	nc, _ := nats.Connect(os.Getenv("NATS_URL"))
//	c := client.New(nc, client.Options{Namespace: "default"})
//	triggers, err := c.ScheduleJob(ctx, client.ScheduleJob{
//		Job:      client.Job{Group: "reports", Name: "daily-stats", Type: "http", Data: map[string]any{"url": "http://reports.internal/run"}},
//		Triggers: []client.Trigger{client.Cron("reports", "nightly", "0 0 2 * * ?", "Europe/Paris")},
//	})
//
// Every command has an id, its idempotency key: the client generates one (a UUID v7) unless the
// body gives one, and retries an unanswered or "unavailable" command with the same id, so a
// command is applied once however often it is sent. A rejection is an *Error with the
// contract's code, a message for a person and the field it is about; errors.Is matches it
// against ErrNotFound, ErrAlreadyExists, ErrFailedPrecondition and the other codes. Every
// request is an "agate.client.<name>" span (OpenTelemetry's global tracer provider) in the
// trace of ctx, and its trace context goes with the request, so the scheduler's spans join the
// caller's trace.
package client
