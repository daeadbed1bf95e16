package client

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/telemetry"
)

// Publisher sends commands on the durable subjects agate.<ns>.cmd.<command>, through JetStream
// and asynchronously: for producers that send many commands at once. A command published is
// stored by JetStream and applied by a scheduler node once, even if nodes restart; its outcome
// is a CommandAccepted or CommandRejected event on agate.<ns>.evt.command, not a reply.
type Publisher struct {
	js     jetstream.JetStream
	ns     string
	window int
}

// NewPublisher returns a Publisher for the namespace ("" is "default") that keeps at most window
// publishes waiting for JetStream's acknowledgement (0: 1024).
func NewPublisher(js jetstream.JetStream, namespace string, window int) *Publisher {
	return &Publisher{js: js, ns: cmp.Or(namespace, "default"), window: cmp.Or(window, 1024)}
}

// BatchCommand is one command of a batch: its name and body (see Client.Command).
type BatchCommand struct {
	Name string
	Body any
}

// Publish publishes the commands in order, asynchronously, and returns their ids (generated
// where a body has none) once JetStream has stored every one, or the first error. A command
// whose publish failed may be published again as is: its id makes it apply once.
func (p *Publisher) Publish(ctx context.Context, cmds []BatchCommand) ([]string, error) {
	ids := make([]string, len(cmds))
	acks := make([]jetstream.PubAckFuture, 0, len(cmds))
	done := 0
	waitOne := func() error { // wait for the oldest acknowledgement not yet received
		f := acks[done]
		done++
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return fmt.Errorf("publishing command %s: %w", f.Msg().Header.Get(jetstream.MsgIDHeader), err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i, c := range cmds {
		data, err := WithID(c.Body)
		if err != nil {
			return nil, fmt.Errorf("command %d (%s): %w", i, c.Name, err)
		}
		var head struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(data, &head)
		ids[i] = head.ID
		msg := nats.NewMsg("agate." + p.ns + ".cmd." + c.Name)
		msg.Data = data
		msg.Header.Set(jetstream.MsgIDHeader, head.ID) // JetStream drops a republished copy
		telemetry.ToHeader(ctx, msg.Header)
		if len(acks)-done >= p.window {
			if err := waitOne(); err != nil {
				return nil, err
			}
		}
		f, err := p.js.PublishMsgAsync(msg)
		if err != nil {
			return nil, fmt.Errorf("publishing command %d (%s): %w", i, c.Name, err)
		}
		acks = append(acks, f)
	}
	for done < len(acks) {
		if err := waitOne(); err != nil {
			return nil, err
		}
	}
	return ids, nil
}
