package command

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
	"github.com/agatesched/agate/internal/wake"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Defaults of Config.
const (
	MaxBodyBytesDefault = 1 << 20
)

// BuiltinJobTypes are the job types cmd/worker runs out of the box.
var BuiltinJobTypes = []string{"http", "log", "noop", "sleep"}

// Config configures a Handler.
type Config struct {
	Namespace  string
	InstanceID string
	// Locks is the lock protocol (global or partitioned); commands take every partition.
	Locks store.Locks
	// JobTypes the scheduler accepts in schedule_job; anything else is rejected. Default
	// BuiltinJobTypes.
	JobTypes []string
	// MaxBodyBytes is the largest command body accepted. Default 1 MiB.
	MaxBodyBytes int
	Logger       *slog.Logger
	// MisfireThreshold is how late a resumed trigger's fire time may be before its misfire
	// instruction applies (Quartz's misfireThreshold). Default 1m.
	MisfireThreshold time.Duration
	// Now is the node clock; tests inject one.
	Now func() time.Time
	// Wake is notified after a command changed triggers, so a trigger due before the acquire
	// loop's next poll fires on time.
	Wake *wake.Signal
}

// Handler validates and applies commands.
type Handler struct {
	cfg    Config
	pool   *pgxpool.Pool
	outbox *outbox.Outbox
	v      *validator
	tracer trace.Tracer
}

// New builds a Handler.
func New(cfg Config, pool *pgxpool.Pool, ob *outbox.Outbox) (*Handler, error) {
	if len(cfg.JobTypes) == 0 {
		cfg.JobTypes = BuiltinJobTypes
	}
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault)
	cfg.MisfireThreshold = cmp.Or(cfg.MisfireThreshold, time.Minute)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v, err := newValidator()
	if err != nil {
		return nil, err
	}
	return &Handler{cfg: cfg, pool: pool, outbox: ob, v: v, tracer: telemetry.Tracer("command")}, nil
}

// Outcome is a command's answer: the api reply, and the data of CommandAccepted/Rejected.
type Outcome struct {
	OK        bool   `json:"ok"`
	CommandID string `json:"commandId,omitempty"`
	Command   string `json:"command,omitempty"`
	Result    any    `json:"result,omitempty"`
	Error     *Error `json:"error,omitempty"`
}

// Transient reports whether the command could not be handled now and may be retried as is.
func (o Outcome) Transient() bool { return o.Error != nil && !o.Error.Final() }

// Handle validates and applies one command. ctx carries the producer's trace context.
func (h *Handler) Handle(ctx context.Context, cmd string, body []byte) Outcome {
	ctx, span := h.tracer.Start(ctx, "agate.command."+cmd, trace.WithSpanKind(trace.SpanKindConsumer))
	defer span.End()
	out := h.handle(ctx, cmd, body)
	span.SetAttributes(attribute.String("agate.command_id", out.CommandID), attribute.Bool("agate.ok", out.OK))
	if out.Error != nil {
		span.SetStatus(codes.Error, out.Error.Error())
	}
	return out
}

func (h *Handler) handle(ctx context.Context, cmd string, body []byte) Outcome {
	log := h.cfg.Logger.With(slog.String("command", cmd))
	if len(body) > h.cfg.MaxBodyBytes {
		return h.rejectUnread(ctx, cmd, body, invalid("", "body is %d bytes; the limit is %d bytes", len(body), h.cfg.MaxBodyBytes))
	}
	if !json.Valid(body) {
		return h.rejectUnread(ctx, cmd, body, invalid("", "body is not valid JSON"))
	}
	if store.JSONHasNUL(body) {
		return h.rejectUnread(ctx, cmd, body, invalid("", "body contains a NUL character (\\u0000), which Agate cannot store; remove it"))
	}
	id := commandID(body)
	if id != "" {
		if prev, ok, err := h.seen(ctx, id); err != nil {
			return h.transient(ctx, cmd, id, err)
		} else if ok {
			log.DebugContext(ctx, "command already handled; answering as before", slog.String("command_id", id))
			return prev
		}
	}
	if !isKnown(cmd) {
		return h.rejectUnread(ctx, cmd, body, invalid("", "unknown command %q; this scheduler accepts: %s", cmd, strings.Join(known, ", ")))
	}
	apply, e := decoders[cmd](h.v, cmd, body)
	if e != nil {
		return h.rejectUnread(ctx, cmd, body, e)
	}

	a := &applyCtx{h: h, commandID: id, traceParent: telemetry.TraceParent(ctx)}
	var out Outcome
	err := h.outbox.InTx(ctx, func(tx *outbox.Tx) error {
		a.tx, a.now = tx, h.cfg.Now()
		if err := h.cfg.Locks.All(ctx, tx); err != nil {
			return err
		}
		result, err := apply(ctx, a)
		if err != nil {
			return err
		}
		out = Outcome{OK: true, CommandID: id, Command: cmd, Result: result}
		return h.record(ctx, a, out, body)
	})
	var rej rejection
	switch {
	case errors.As(err, &rej):
		return h.rejectUnread(ctx, cmd, body, rej.err)
	case errors.Is(err, errDuplicate):
		if prev, ok, err := h.seen(ctx, id); err == nil && ok {
			return prev
		}
		return h.transient(ctx, cmd, id, errDuplicate)
	case err != nil:
		return h.transient(ctx, cmd, id, err)
	}
	h.cfg.Wake.Notify()
	log.InfoContext(ctx, "command applied", slog.String("command_id", id))
	return out
}

var errDuplicate = errors.New("the same command id is being applied by another node")

// record remembers a final outcome under the command id and appends the command's events,
// its outcome's last, in tx.
func (h *Handler) record(ctx context.Context, a *applyCtx, out Outcome, body []byte) error {
	if out.CommandID != "" && (out.Error == nil || out.Error.Final()) {
		enc, err := json.Marshal(out)
		if err != nil {
			return fmt.Errorf("encoding outcome: %w", err)
		}
		tag, err := a.tx.Exec(ctx, queries.Get("RememberOutcome"), h.cfg.Namespace, out.CommandID, enc)
		if err != nil {
			return fmt.Errorf("remembering command outcome: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return errDuplicate
		}
	}
	typ, data := events.TypeCommandAccepted, any(out)
	if !out.OK {
		// The published event says which body was rejected (size and hash), not what it held:
		// other producers may read the subject. The body itself stays in the database.
		typ = events.TypeCommandRejected
		sum := sha256.Sum256(body)
		data = map[string]any{"commandId": out.CommandID, "command": out.Command, "error": out.Error,
			"size": len(body), "sha256": hex.EncodeToString(sum[:])}
		if _, err := a.tx.Exec(ctx, queries.Get("KeepRejectedBody"), h.cfg.Namespace, sum[:], body); err != nil {
			return fmt.Errorf("keeping the rejected body: %w", err)
		}
	}
	aggID := out.CommandID
	if aggID == "" {
		aggID = "(no id)"
	}
	return a.event(typ, events.AggregateCommand, aggID, "command", data)
}

// rejectUnread records a rejection (final outcome + CommandRejected event) in its own transaction.
func (h *Handler) rejectUnread(ctx context.Context, cmd string, body []byte, e *Error) Outcome {
	id := commandID(body)
	// The command name comes from the subject, which may hold anything.
	out := Outcome{OK: false, CommandID: id, Command: strings.ToValidUTF8(strings.ReplaceAll(cmd, "\x00", ""), "?"), Error: e}
	a := &applyCtx{h: h, commandID: id, traceParent: telemetry.TraceParent(ctx)}
	err := h.outbox.InTx(ctx, func(tx *outbox.Tx) error {
		a.tx, a.now = tx, h.cfg.Now()
		return h.record(ctx, a, out, body)
	})
	if errors.Is(err, errDuplicate) {
		if prev, ok, err := h.seen(ctx, id); err == nil && ok {
			return prev
		}
	}
	if err != nil {
		return h.transient(ctx, cmd, id, err)
	}
	h.cfg.Logger.WarnContext(ctx, "command rejected", slog.String("command", cmd), slog.String("command_id", id),
		slog.String("code", e.Code), slog.String("field", e.Field), slog.String("reason", e.Message))
	return out
}

func (h *Handler) transient(ctx context.Context, cmd, id string, err error) Outcome {
	h.cfg.Logger.WarnContext(ctx, "command could not be handled now; it can be retried",
		slog.String("command", cmd), slog.String("command_id", id), slog.Any("error", err))
	e := &Error{Code: CodeUnavailable, Message: "the scheduler could not reach its database; retry with the same id"}
	if !store.IsTransient(err) {
		e = &Error{Code: CodeInternal, Message: "the scheduler failed to apply the command (its log says why); " +
			"the id is not remembered, so the command may be sent again"}
	}
	return Outcome{OK: false, CommandID: id, Command: cmd, Error: e}
}

func (h *Handler) seen(ctx context.Context, id string) (Outcome, bool, error) {
	var raw []byte
	err := h.pool.QueryRow(ctx, queries.Get("SeenOutcome"), h.cfg.Namespace, id).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return Outcome{}, false, nil
	}
	if err != nil {
		return Outcome{}, false, fmt.Errorf("reading command outcome: %w", err)
	}
	var out Outcome
	if err := json.Unmarshal(raw, &out); err != nil {
		return Outcome{}, false, fmt.Errorf("reading command outcome: %w", err)
	}
	return out, true, nil
}

// commandID is the body's id when it is a string of at most 128 characters, else "": an
// outcome is remembered only under an id the contract allows.
func commandID(body []byte) string {
	var head struct {
		ID any `json:"id"`
	}
	_ = json.Unmarshal(body, &head)
	id, _ := head.ID.(string)
	if len(id) > 128 || strings.ContainsRune(id, 0) {
		return ""
	}
	return id
}

// GiveUp ends a command that failed with an internal error on every delivery: it is recorded as
// rejected with that code, so that it stops being redelivered and its producer can see why.
func (h *Handler) GiveUp(ctx context.Context, cmd string, body []byte, deliveries int, last *Error) {
	h.cfg.Logger.ErrorContext(ctx, "giving up a command that failed on every delivery", slog.String("command", cmd),
		slog.String("command_id", commandID(body)), slog.Int("deliveries", deliveries), slog.String("error", last.Message))
	h.rejectUnread(ctx, cmd, body, &Error{Code: CodeInternal,
		Message: fmt.Sprintf("the scheduler failed to apply this command %d times (%s); it was given up", deliveries, last.Message)})
}
