package devcluster

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/events"
)

// The example schedules dev mode loads. Their command ids are fixed, so a second run is answered
// "already applied" and picks up where the first left off.
var examples = []string{`{
  "id": "dev-example-v1",
  "job": {"group": "examples", "name": "heartbeat", "type": "log", "data": {"message": "hello from Agate"}},
  "triggers": [{"group": "examples", "name": "every-5s", "simple": {"interval": "5s", "repeatCount": -1}}]
}`, `{
  "id": "dev-example-v1-cron",
  "job": {"group": "examples", "name": "nap", "type": "sleep", "data": {"duration": "1500ms"}, "nonconcurrent": true},
  "triggers": [{"group": "examples", "name": "every-10s", "cron": {"expression": "0/10 * * * * ?", "timeZone": "UTC"}},
               {"group": "examples", "name": "every-3s", "simple": {"interval": "3s", "repeatCount": -1}}]
}`}

// outcome is the part of a command's reply the loader reads (docs/contract.md, "Outcomes").
type outcome struct {
	OK        bool   `json:"ok"`
	CommandID string `json:"commandId"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// loadExamples sends the example schedules through the request-reply API, as a producer would,
// retrying until the node answers. The node logs each command it applies or rejects; this logs
// only a reply it could not read.
func loadExamples(ctx context.Context, nc *nats.Conn, ns string, log *slog.Logger) error {
	for _, body := range examples {
		for {
			reply, err := nc.RequestWithContext(ctx, events.Subjects(ns).API("schedule_job"), []byte(body))
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				// The node is still starting; a bounded wait, then ask again.
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			var out outcome
			if err := json.Unmarshal(reply.Data, &out); err != nil {
				log.Warn("unreadable reply to the example schedule", slog.String("error", err.Error()))
			} else if !out.OK && out.Error != nil {
				log.Debug("example schedule not loaded", slog.String("reason", out.Error.Message))
			}
			break
		}
	}
	return nil
}
