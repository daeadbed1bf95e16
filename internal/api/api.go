// Package api serves a scheduler node's request-reply API, agate.<ns>.api.<name>, as one NATS
// service (nats.go's micro, named agate-<ns>): every command and every query is an endpoint, so
// $SRV.PING, $SRV.INFO and $SRV.STATS discover them and report per-endpoint counts, errors and
// processing time. The endpoints share the queue group agate-scheduler: one node answers each
// request.
//
// It is transport only: what a request means is the handler's business (internal/command,
// internal/query), wired in internal/node. A reply that reports a failure also carries micro's
// error headers, so the service's statistics count it.
package api

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/telemetry"
)

// QueueGroup is the queue group of every endpoint: one node answers each request.
const QueueGroup = "agate-scheduler"

// UnknownQueueGroup is the queue group of the subscription that answers requests on names no
// endpoint serves. It must differ from QueueGroup: NATS merges the members of one queue group
// across subjects, so agate.<ns>.api.* in QueueGroup would take requests meant for endpoints.
const UnknownQueueGroup = "agate-scheduler-unknown"

// Version is the service's version: the wire contract's (docs/contract.md, v1).
const Version = "1.0.0"

// Handler answers one request: reply is encoded as the JSON body, and failed, when not nil,
// says the reply reports a failure (reply then holds it too).
type Handler func(ctx context.Context, body []byte) (reply any, failed *apierr.Error)

// Endpoint is one name of agate.<ns>.api.<name>.
type Endpoint struct {
	Name   string
	Kind   string // "command" or "query", the endpoint's metadata
	Handle Handler
	// Concurrent endpoints handle each request on a goroutine of its own (at most InFlight per
	// node at once), so that concurrent requests can be applied together (commands join one
	// batch transaction). micro measures a handler's processing time and counts its errors when
	// the handler returns, which for these is at once: their statistics count requests only.
	Concurrent bool
}

// InFlight is how many requests of Concurrent endpoints one node handles at once; more wait in
// their subscriptions.
const InFlight = 512

// Config configures the service of one node.
type Config struct {
	Namespace  string
	InstanceID string
	Logger     *slog.Logger
	Endpoints  []Endpoint
	// Unknown, when set, answers a request on a name that no endpoint serves (the commands
	// step rejects it as an unknown command and records the rejection).
	Unknown func(ctx context.Context, name string, body []byte) (reply any, failed *apierr.Error)
	// Local, when set, answers the endpoints in process while the service runs (the web UI).
	Local *Local
	// Serving, when set, is called once every endpoint is subscribed: requests are answered
	// from then on (the node's readiness waits for it).
	Serving func()
}

// Serve runs the service until ctx is cancelled.
func Serve(ctx context.Context, nc *nats.Conn, cfg Config) error {
	log := cmp.Or(cfg.Logger, slog.Default())
	subjects := events.Subjects(cfg.Namespace)
	svc, err := micro.AddService(nc, micro.Config{
		Name:        events.ServiceName(cfg.Namespace),
		Version:     Version,
		Description: "Agate scheduler of namespace " + cfg.Namespace + ": commands and queries",
		QueueGroup:  QueueGroup,
		Metadata:    map[string]string{"namespace": cfg.Namespace, "instance": cfg.InstanceID},
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			log.WarnContext(ctx, "NATS reported an error on the api service", slog.String("subject", e.Subject),
				slog.String("error", e.Description))
		},
	})
	if err != nil {
		return fmt.Errorf("starting the api service %s: %w", events.ServiceName(cfg.Namespace), err)
	}
	defer func() {
		if err := svc.Stop(); err != nil {
			log.Warn("stopping the api service", slog.Any("error", err))
		}
	}()
	served := map[string]bool{}
	slots := make(chan struct{}, InFlight)
	var inflight sync.WaitGroup
	defer inflight.Wait() // answers in flight go out before the service stops
	for _, e := range cfg.Endpoints {
		handle := e.Handle
		answer := func(req micro.Request) {
			reply, failed := handle(telemetry.FromHeader(ctx, nats.Header(req.Headers())), req.Data())
			if req.Reply() == "" {
				return // published, not requested: handled, nobody to answer
			}
			body, failed := encode(reply, failed, nc.MaxPayload())
			var err error
			if failed != nil {
				err = req.Error(statusOf(failed.Code), failed.Error(), body)
			} else {
				err = req.Respond(body)
			}
			if err != nil {
				log.WarnContext(ctx, "answering an api request failed", slog.String("subject", req.Subject()), slog.Any("error", err))
			}
		}
		if e.Concurrent {
			serial := answer
			answer = func(req micro.Request) {
				slots <- struct{}{}
				inflight.Add(1)
				go func() {
					defer func() { <-slots; inflight.Done() }()
					serial(req)
				}()
			}
		}
		err := svc.AddEndpoint(e.Name, micro.HandlerFunc(answer),
			micro.WithEndpointSubject(subjects.API(e.Name)), micro.WithEndpointMetadata(map[string]string{"kind": e.Kind}))
		if err != nil {
			return fmt.Errorf("adding the api endpoint %s: %w", subjects.API(e.Name), err)
		}
		served[e.Name] = true
	}
	if cfg.Unknown != nil {
		sub, err := nc.QueueSubscribe(subjects.API("*"), UnknownQueueGroup, func(m *nats.Msg) {
			name := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
			if served[name] {
				return // an endpoint answers it
			}
			reply, failed := cfg.Unknown(telemetry.FromHeader(ctx, m.Header), name, m.Data)
			if m.Reply == "" {
				return
			}
			body, failed := encode(reply, failed, nc.MaxPayload())
			msg := &nats.Msg{Data: body}
			if failed != nil {
				msg.Header = nats.Header{micro.ErrorHeader: {failed.Error()}, micro.ErrorCodeHeader: {statusOf(failed.Code)}}
			}
			if err := m.RespondMsg(msg); err != nil {
				log.WarnContext(ctx, "answering an api request failed", slog.String("subject", m.Subject), slog.Any("error", err))
			}
		})
		if err != nil {
			return fmt.Errorf("subscribing to %s: %w", subjects.API("*"), err)
		}
		defer func() { _ = sub.Drain() }()
	}
	defer cfg.Local.serve(cfg.Endpoints)()
	if err := nc.Flush(); err != nil { // the subscriptions reached the server
		return fmt.Errorf("subscribing the api service: %w", err)
	}
	if cfg.Serving != nil {
		cfg.Serving()
	}
	<-ctx.Done()
	return nil
}

// encode is reply's JSON, or an error reply when it cannot be sent: NATS refuses a message
// larger than the server's max payload, and the requester would only see a timeout.
func encode(reply any, failed *apierr.Error, maxPayload int64) ([]byte, *apierr.Error) {
	body, err := json.Marshal(reply)
	if err != nil {
		failed = &apierr.Error{Code: apierr.CodeInternal, Message: "encoding the reply failed"}
		return errorBody(failed), failed
	}
	if maxPayload > 0 && int64(len(body)) > maxPayload {
		failed = apierr.Invalid("", "the reply would be %d bytes, more than the %d bytes NATS carries; ask for fewer items (limit)",
			len(body), maxPayload)
		return errorBody(failed), failed
	}
	return body, failed
}

func errorBody(e *apierr.Error) []byte {
	body, _ := json.Marshal(map[string]any{"ok": false, "error": e}) // a map of strings always encodes
	return body
}

// statusOf is the Nats-Service-Error-Code of an error code: the HTTP status Google's API design
// guide maps it to, as micro's convention is HTTP-like codes.
func statusOf(code string) string {
	switch code {
	case apierr.CodeInvalidArgument, apierr.CodeFailedPrecondition:
		return "400"
	case apierr.CodeNotFound:
		return "404"
	case apierr.CodeAlreadyExists:
		return "409"
	case apierr.CodeUnavailable:
		return "503"
	}
	return "500"
}
