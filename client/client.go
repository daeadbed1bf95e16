package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/telemetry"
)

// Error codes of the contract's outcomes.
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodeFailedPrecondition = "failed_precondition"
	CodeUnavailable        = "unavailable"
	CodeInternal           = "internal"
)

// Sentinel errors, one per code: errors.Is(err, client.ErrNotFound) holds for an *Error with
// code not_found.
var (
	ErrInvalidArgument    = errors.New(CodeInvalidArgument)
	ErrNotFound           = errors.New(CodeNotFound)
	ErrAlreadyExists      = errors.New(CodeAlreadyExists)
	ErrFailedPrecondition = errors.New(CodeFailedPrecondition)
	ErrUnavailable        = errors.New(CodeUnavailable)
	ErrInternal           = errors.New(CodeInternal)
)

var sentinels = map[string]error{
	CodeInvalidArgument: ErrInvalidArgument, CodeNotFound: ErrNotFound, CodeAlreadyExists: ErrAlreadyExists,
	CodeFailedPrecondition: ErrFailedPrecondition, CodeUnavailable: ErrUnavailable, CodeInternal: ErrInternal,
}

// Error is a rejection from the scheduler: a code, a message for a person, and the field of the
// request it is about ("triggers[0].cron.expression").
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Code + ": " + e.Field + ": " + e.Message
	}
	return e.Code + ": " + e.Message
}

// Is makes errors.Is(err, ErrNotFound) and the like match by code.
func (e *Error) Is(target error) bool { return sentinels[e.Code] == target }

// Options configure a Client. Zero values take the documented defaults.
type Options struct {
	// Namespace is the scheduler namespace. Default "default".
	Namespace string
	// RequestTimeout bounds one request-reply round trip. Default 10s.
	RequestTimeout time.Duration
	// RetryFor is how long a command answered unavailable (the scheduler could not reach its
	// database), or not answered at all, is retried with the same id — safe, as commands are
	// idempotent by id. It never goes past the context's deadline. Default 30s; a negative
	// value disables retries.
	RetryFor time.Duration
}

// Client sends commands and queries to an Agate cluster over NATS request-reply
// (agate.<ns>.api.*). It is safe for concurrent use.
type Client struct {
	nc   *nats.Conn
	opts Options
}

// New returns a client on an open NATS connection (the caller closes it).
func New(nc *nats.Conn, opts Options) *Client {
	opts.Namespace = cmp.Or(opts.Namespace, "default")
	opts.RequestTimeout = cmp.Or(opts.RequestTimeout, 10*time.Second)
	opts.RetryFor = cmp.Or(opts.RetryFor, 30*time.Second)
	return &Client{nc: nc, opts: opts}
}

// tracer makes the spans of requests.
var tracer = telemetry.Tracer("client")

// Subject is the request-reply subject of a command or query.
func (c *Client) Subject(name string) string { return "agate." + c.opts.Namespace + ".api." + name }

// NewID returns a command id: a UUID v7, so ids sort by creation time.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// Command sends a command by name with body (any value that encodes to the command's JSON
// object). An "id" field is added when body has none (or an empty one), so a retry reuses it.
// It returns the outcome, or an *Error when the command was rejected.
func (c *Client) Command(ctx context.Context, name string, body any) (*Outcome, error) {
	data, err := WithID(body)
	if err != nil {
		return nil, err
	}
	var out Outcome
	if err := c.do(ctx, name, data, &out); err != nil {
		return nil, err
	}
	if out.Error != nil {
		return &out, out.Error
	}
	if !out.OK {
		return &out, fmt.Errorf("%s: the scheduler answered neither ok nor an error", name)
	}
	return &out, nil
}

// do sends one request, retrying a lost answer or one that says "unavailable" with the same
// body until RetryFor or ctx ends, and decodes the last reply into out.
//
// The request, retries included, is an "agate.client.<name>" span (a child of ctx's span, if
// any); the scheduler's span of the command or query is its child.
func (c *Client) do(ctx context.Context, name string, data []byte, out any) (err error) {
	ctx, span := tracer.Start(ctx, "agate.client."+name, trace.WithSpanKind(trace.SpanKindClient))
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if span.IsRecording() {
		span.SetAttributes(telemetry.Messaging(telemetry.OpPublish, c.Subject(name))...)
		span.SetAttributes(attribute.String("agate.namespace", c.opts.Namespace))
	}
	retryUntil := time.Now().Add(c.opts.RetryFor)
	delay := 50 * time.Millisecond
	for {
		reply, err := c.once(ctx, name, data)
		transient := errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
			errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
		if err == nil {
			var head struct {
				Error *Error `json:"error"`
			}
			if json.Unmarshal(reply, &head) == nil && head.Error != nil && head.Error.Code == CodeUnavailable {
				transient = true
			}
		}
		last := !transient || c.opts.RetryFor < 0 || time.Now().Add(delay).After(retryUntil)
		if !last {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				last = true
			case <-t.C:
			}
			delay = min(2*delay, time.Second)
		}
		if !last {
			continue
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(reply, out); err != nil {
			return fmt.Errorf("%s: the answer is not JSON: %w", name, err)
		}
		return nil
	}
}

func (c *Client) once(ctx context.Context, name string, data []byte) ([]byte, error) {
	msg := nats.NewMsg(c.Subject(name))
	msg.Data = data
	telemetry.ToHeader(ctx, msg.Header)
	rctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	reply, err := c.nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		return nil, fmt.Errorf("%s: no answer from the scheduler on %s: %w", name, msg.Subject, err)
	}
	return reply.Data, nil
}

// WithID encodes a command body (any value that encodes to a JSON object, json.RawMessage too)
// and gives it an id when it has none, so that a retry reuses it.
func WithID(body any) ([]byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the command: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("a command body must encode to a JSON object, got %.40s", data)
	}
	if id, ok := obj["id"]; ok && string(id) != `""` && string(id) != "null" {
		return data, nil
	}
	obj["id"], _ = json.Marshal(NewID())
	return json.Marshal(obj)
}
