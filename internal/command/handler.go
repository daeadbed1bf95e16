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
	"runtime"
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
	"github.com/agatesched/agate/internal/warm"
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
	// Locks is the lock protocol (global or partitioned). A batch of commands takes the
	// partitions of the jobs its commands name, or all of them (see jobScoped).
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
	// Wake is notified (NotifyDue) with the earliest fire time of the triggers a batch
	// scheduled, so a trigger due before the acquire loop's next pass fires on time.
	Wake *wake.Signal
	// Batch is the most commands applied in one transaction. Default BatchDefault.
	Batch int
	// GatherWait is how long a batch waits for more commands. Default GatherWaitDefault.
	GatherWait time.Duration
	// ConcurrentBatches is how many batch transactions run at once. Default
	// ConcurrentBatchesDefault.
	ConcurrentBatches int
}

// Handler validates and applies commands.
type Handler struct {
	cfg     Config
	pool    *pgxpool.Pool
	outbox  *outbox.Outbox
	v       *validator
	tracer  trace.Tracer
	gather  *gatherer  // of the durable consumer's commands and Apply's
	readers *warm.Pool // run prepare for the gatherer's callers, at most GOMAXPROCS at once

	metrics metrics
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
	h := &Handler{cfg: cfg, pool: pool, outbox: ob, v: v, tracer: telemetry.Tracer("command"), metrics: newMetrics(nil)}
	h.gather, h.readers = newGatherer(h), warm.New(runtime.GOMAXPROCS(0), warmIdle)
	return h, nil
}

// Apply handles one command as part of a batch: it joins the commands other callers (the
// durable consumer, concurrent requests) are applying, and returns its outcome once the batch
// committed. The api service calls it for each request on its own goroutine.
func (h *Handler) Apply(ctx context.Context, cmd string, body []byte) Outcome {
	return h.gather.do(ctx, Request{Ctx: ctx, Command: cmd, Body: body}, 0)
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

// Request is one command to handle: its name (the last token of its subject) and its body. Ctx
// carries the producer's trace context; nil means HandleBatch's ctx.
type Request struct {
	Ctx     context.Context
	Command string
	Body    []byte
}

// Handle validates and applies one command. ctx carries the producer's trace context.
func (h *Handler) Handle(ctx context.Context, cmd string, body []byte) Outcome {
	return h.HandleBatch(ctx, []Request{{Ctx: ctx, Command: cmd, Body: body}})[0]
}

// HandleBatch validates and applies commands in one transaction and returns their outcomes, in
// the order of reqs. Each command is applied in its own savepoint, so a rejected one changes
// nothing and the others commit; the transaction takes the lock partitions of the jobs the
// commands name (every partition when one of them names none), in ascending order. A command
// whose id was already handled, or appears earlier in reqs, is answered as that one was.
// When the transaction fails as a whole (the database went away), every command that was not
// answered from an earlier outcome is answered as transient, and none is remembered.
func (h *Handler) HandleBatch(ctx context.Context, reqs []Request) []Outcome {
	items := make([]*item, len(reqs))
	for i, r := range reqs {
		items[i] = h.prepare(ctx, r)
	}
	h.run(ctx, items)
	h.metrics.answered(ctx, items)
	outs := make([]Outcome, len(items))
	for i, it := range items {
		outs[i] = h.finish(it, len(items))
	}
	return outs
}

// item is one command of a batch on its way to its outcome.
type item struct {
	ctx  context.Context // the request's, inside its span
	span trace.Span
	cmd  string
	body []byte
	id   string

	early *Error  // a rejection recorded whatever the id's past: size, JSON (or GiveUp's)
	rej   *Error  // a rejection of the command as decoded, recorded unless the id was handled
	cmdv  command // decoded: what applies it and what it locks

	dupOf *item // an earlier item of the batch with the same id
	raced bool  // another transaction remembered the id first: its outcome is read after commit
	fail  error // the command failed in its savepoint (a bug, not a rejection): answered internal
	done  bool  // out is the answer, from the id's past
	out   Outcome
	due   time.Time // earliest fire time of a trigger it scheduled, zero when none
}

// prepare takes a request as far as it goes without the database: size, JSON syntax, id,
// command name, JSON Schema and decoding. The gatherer's callers have it run by h.readers, so
// that commands gathered from concurrent callers are decoded in parallel, on grown stacks.
func (h *Handler) prepare(ctx context.Context, r Request) *item {
	rctx := r.Ctx
	if rctx == nil {
		rctx = ctx
	}
	rctx, span := h.tracer.Start(rctx, "agate.command."+r.Command, trace.WithSpanKind(trace.SpanKindConsumer))
	it := &item{ctx: rctx, span: span, cmd: r.Command, body: r.Body}
	doc, err := parseBody(it.body) // once, for the syntax check, the id and the JSON Schema
	it.early = h.precheck(it, err)
	it.id = commandID(doc)
	switch {
	case it.early != nil:
	case !isKnown(it.cmd):
		it.rej = invalid("", "unknown command %q; this scheduler accepts: %s", it.cmd, strings.Join(known, ", "))
	default:
		it.cmdv, it.rej = decoders[it.cmd](h.v, it.cmd, doc, it.body)
	}
	return it
}

// finish ends the item's span and returns its outcome (which the batch's runner counted).
func (h *Handler) finish(it *item, batch int) Outcome {
	if it.span.IsRecording() {
		it.span.SetAttributes(telemetry.MessagingNATS, attribute.String("messaging.operation.type", telemetry.OpProcess),
			telemetry.DBPostgres, attribute.String("agate.namespace", h.cfg.Namespace),
			attribute.String("agate.command_id", it.out.CommandID), attribute.Bool("agate.ok", it.out.OK),
			attribute.Int("agate.batch", batch))
	}
	if it.out.Error != nil {
		it.span.SetStatus(codes.Error, it.out.Error.Error())
	}
	it.span.End()
	return it.out
}

// applies reports whether the item is a command to apply (not a rejection).
func (it *item) applies() bool { return it.early == nil && it.rej == nil }

// precheck is the checks before the id: size, JSON syntax (parseErr, parseBody's), and no NUL
// that PostgreSQL could not store.
func (h *Handler) precheck(it *item, parseErr error) *Error {
	switch {
	case len(it.body) > h.cfg.MaxBodyBytes:
		return invalid("", "body is %d bytes; the limit is %d bytes", len(it.body), h.cfg.MaxBodyBytes)
	case parseErr != nil:
		return invalid("", "body is not valid JSON")
	case store.JSONHasNUL(it.body):
		return invalid("", "body contains a NUL character (\\u0000), which Agate cannot store; remove it")
	}
	return nil
}

// run takes prepared items to their outcomes in one transaction; see HandleBatch.
func (h *Handler) run(ctx context.Context, items []*item) {
	first := map[string]*item{}
	for _, it := range items {
		if it.id == "" {
			continue
		}
		if f, ok := first[it.id]; ok {
			it.dupOf = f
			continue
		}
		first[it.id] = it
	}
	if err := h.outbox.InTx(ctx, func(tx *outbox.Tx) error { return h.applyAll(ctx, tx, items) }); err != nil {
		for _, it := range items {
			switch {
			case it.dupOf != nil && it.dupOf.done:
				it.out = it.dupOf.out
			case !it.done:
				it.out = h.transient(it.ctx, it.cmd, it.id, err)
			}
		}
		return
	}
	var raced []string
	for _, it := range items {
		if it.raced {
			raced = append(raced, it.id)
		}
	}
	if len(raced) > 0 {
		prev, err := h.seen(ctx, h.pool, raced)
		for _, it := range items {
			if !it.raced {
				continue
			}
			if out, ok := prev[it.id]; ok && err == nil {
				it.out = out
			} else {
				it.out = h.transient(it.ctx, it.cmd, it.id, cmp.Or(err, errDuplicate))
			}
		}
	}
	var due time.Time
	for _, it := range items {
		switch {
		case it.dupOf != nil:
			it.out = it.dupOf.out
		case it.fail != nil:
			it.out = h.transient(it.ctx, it.cmd, it.id, it.fail)
		case it.raced || it.done:
		case it.out.OK:
			h.cfg.Logger.DebugContext(it.ctx, "command applied", slog.String("command", it.cmd), slog.String("command_id", it.id))
			if !it.due.IsZero() && (due.IsZero() || it.due.Before(due)) {
				due = it.due
			}
		default:
			e := it.out.Error
			h.cfg.Logger.WarnContext(it.ctx, "command rejected", slog.String("command", it.cmd), slog.String("command_id", it.id),
				slog.String("code", e.Code), slog.String("field", e.Field), slog.String("reason", e.Message))
		}
	}
	if !due.IsZero() {
		h.cfg.Wake.NotifyDue(due)
	}
}

// applyAll is the batch's transaction: it answers the ids handled before, takes the locks of the
// commands to apply, applies each in a savepoint and records every final outcome. An error fails
// the whole batch.
func (h *Handler) applyAll(ctx context.Context, tx *outbox.Tx, items []*item) error {
	var ids []string
	for _, it := range items {
		it.out, it.done, it.raced, it.fail, it.due = Outcome{}, false, false, nil, time.Time{}
		if it.dupOf == nil && it.early == nil && it.id != "" {
			ids = append(ids, it.id)
		}
	}
	prev, err := h.seen(ctx, tx, ids)
	if err != nil {
		return err
	}
	var todo []*item
	for _, it := range items {
		if out, ok := prev[it.id]; ok && it.dupOf == nil && it.early == nil {
			h.cfg.Logger.DebugContext(it.ctx, "command already handled; answering as before", slog.String("command_id", it.id))
			it.out, it.done = out, true
			continue
		}
		if it.dupOf == nil {
			todo = append(todo, it)
		}
	}
	bulk, err := h.lockAndBulk(ctx, tx, todo)
	if err != nil {
		return err
	}
	for _, it := range todo {
		if bulk[it] {
			continue
		}
		rej := cmp.Or(it.early, it.rej)
		if rej == nil {
			a := h.applyCtx(it, tx)
			err := tx.Savepoint(ctx, func(*outbox.Tx) error {
				result, err := it.cmdv.apply(it.ctx, a)
				if err != nil {
					return err
				}
				it.out = Outcome{OK: true, CommandID: it.id, Command: it.cmd, Result: result}
				return h.record(it.ctx, a, it.out, it.body)
			})
			var r rejection
			switch {
			case err == nil:
				// A command that did not say when its triggers are due (dueAt) may have made one
				// due now (a resume, a delete that unblocks nothing, a calendar): wake the loop,
				// as every command did before batches.
				it.due = cmp.Or(a.due, a.now)
				continue
			case errors.As(err, &r):
				rej = r.err
			case errors.Is(err, errDuplicate):
				it.raced = true
				continue
			case store.IsTransient(err) || ctx.Err() != nil:
				return err
			default:
				// This command alone failed (a bug, or data the checks missed): the others go on,
				// and it is answered internal, so it comes round again.
				it.fail = err
				continue
			}
		}
		// The command name comes from the subject, which may hold anything.
		it.out = Outcome{OK: false, CommandID: it.id, Command: strings.ToValidUTF8(strings.ReplaceAll(it.cmd, "\x00", ""), "?"), Error: rej}
		a := h.applyCtx(it, tx)
		err := tx.Savepoint(ctx, func(*outbox.Tx) error {
			return h.record(it.ctx, a, it.out, it.body)
		})
		switch {
		case errors.Is(err, errDuplicate):
			it.raced = true
		case err != nil:
			return err
		}
	}
	return nil
}

// lockAndBulk takes the batch's locks and applies its new jobs in bulk (bulkSchedule). Commands
// that only insert new jobs (bulkCandidate) need Locks.NewJobs, not their jobs' partitions; the
// others, and the candidates the bulk leaves to the general way, take their jobs' partitions
// after it (Locks.NewJobs comes before any partition: the lock order of docs/architecture.md).
// A batch with a command that locks everything takes every partition first and the bulk runs
// under them.
func (h *Handler) lockAndBulk(ctx context.Context, tx *outbox.Tx, todo []*item) (map[*item]bool, error) {
	var rest scope
	newJobs := false
	for _, it := range todo {
		if !it.applies() {
			continue
		}
		if _, ok := bulkCandidate(it); ok {
			newJobs = true
			continue
		}
		rest = rest.union(it.cmdv.scope)
	}
	var paused bool
	var err error
	switch {
	case rest.all:
		if err := rest.lock(ctx, tx, h.cfg.Locks); err != nil {
			return nil, err
		}
		if newJobs {
			paused, err = h.cfg.Locks.GroupsPaused(ctx, tx)
		}
	case newJobs:
		paused, err = h.cfg.Locks.NewJobs(ctx, tx)
	}
	if err != nil {
		return nil, err
	}
	var bulk map[*item]bool
	if newJobs {
		if bulk, err = h.bulkSchedule(ctx, tx, todo, paused); err != nil {
			return nil, err
		}
	}
	if rest.all {
		return bulk, nil
	}
	for _, it := range todo {
		if _, ok := bulkCandidate(it); ok && !bulk[it] {
			rest = rest.union(it.cmdv.scope)
		}
	}
	return bulk, rest.lock(ctx, tx, h.cfg.Locks)
}

func (h *Handler) applyCtx(it *item, tx *outbox.Tx) *applyCtx {
	return &applyCtx{h: h, tx: tx, now: h.cfg.Now(), commandID: it.id, traceParent: telemetry.TraceParent(it.ctx)}
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var errDuplicate = errors.New("the same command id is being applied by another node")

// record remembers a final outcome under the command id and appends the command's events,
// its outcome's last, in tx.
func (h *Handler) record(ctx context.Context, a *applyCtx, out Outcome, body []byte) error {
	var enc json.RawMessage
	if out.CommandID != "" && (out.Error == nil || out.Error.Final()) {
		var err error
		enc, err = json.Marshal(out)
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
	if enc != nil {
		data = enc
	}
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

func (h *Handler) transient(ctx context.Context, cmd, id string, err error) Outcome {
	h.cfg.Logger.WarnContext(ctx, "command could not be handled now; it can be retried",
		slog.String("command", cmd), slog.String("command_id", id), slog.Any("error", err))
	e := &Error{Code: CodeUnavailable, Message: "the scheduler could not apply the command now (its database is unreachable or restarting, " +
		"or the transaction conflicted with another); retry with the same id"}
	if !store.IsTransient(err) {
		e = &Error{Code: CodeInternal, Message: "the scheduler failed to apply the command (its log says why); " +
			"the id is not remembered, so the command may be sent again"}
	}
	return Outcome{OK: false, CommandID: id, Command: cmd, Error: e}
}

// seen reads the remembered outcomes of ids.
func (h *Handler) seen(ctx context.Context, q querier, ids []string) (map[string]Outcome, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, queries.Get("SeenOutcomes"), h.cfg.Namespace, ids)
	if err != nil {
		return nil, fmt.Errorf("reading command outcomes: %w", err)
	}
	defer rows.Close()
	prev := make(map[string]Outcome, len(ids))
	for rows.Next() {
		var id string
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, fmt.Errorf("reading command outcomes: %w", err)
		}
		var out Outcome
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, fmt.Errorf("reading the outcome of command %s: %w", id, err)
		}
		prev[id] = out
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading command outcomes: %w", err)
	}
	return prev, nil
}

// commandID is the id of a body parsed by parseBody when it is a string of at most 128
// characters, else "": an outcome is remembered only under an id the contract allows.
func commandID(doc any) string {
	obj, _ := doc.(map[string]any)
	id, _ := obj["id"].(string)
	if len(id) > 128 || strings.ContainsRune(id, 0) {
		return ""
	}
	return id
}

// GiveUp ends a command that failed with an internal error on every delivery: it is recorded as
// rejected with that code, so that it stops being redelivered and its producer can see why.
func (h *Handler) GiveUp(ctx context.Context, cmd string, body []byte, deliveries int, last *Error) {
	doc, _ := parseBody(body) // an id for the log if it has one
	h.cfg.Logger.ErrorContext(ctx, "giving up a command that failed on every delivery", slog.String("command", cmd),
		slog.String("command_id", commandID(doc)), slog.Int("deliveries", deliveries), slog.String("error", last.Message))
	it := h.prepare(ctx, Request{Ctx: ctx, Command: cmd, Body: body})
	it.early = &Error{Code: CodeInternal,
		Message: fmt.Sprintf("the scheduler failed to apply this command %d times (%s); it was given up", deliveries, last.Message)}
	h.run(ctx, []*item{it})
	h.metrics.answered(ctx, []*item{it})
	h.finish(it, 1)
}
