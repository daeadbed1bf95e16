// Package query answers the scheduler's read-only requests, agate.<ns>.api.<query> (docs/
// contract.md, "Queries"): jobs, triggers and their next fire times, calendars, the executions
// in flight, the event log's history of a job or trigger, and the nodes of the cluster.
//
// A query changes nothing and takes no lock: it reads committed rows, so it never waits for,
// nor delays, a fire. Bodies are validated like commands (JSON Schemas in schemas/json/query,
// unknown fields rejected) and failures use the commands' error shape (internal/apierr).
// Lists are paged by an opaque cursor that holds the last key returned, so a page is an index
// range scan however deep it is.
package query

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/presence"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
	"github.com/agatesched/agate/schemas"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Limits of docs/contract.md.
const (
	MaxBodyBytes   = 64 << 10
	DefaultLimit   = 100
	MaxLimit       = 1000
	DefaultHistory = 50
	MaxHistory     = 200 // events carry job data: a page of them must fit in one NATS message
	DefaultCount   = 10
	MaxCount       = 100
	TimeoutDefault = 10 * time.Second
)

// Config configures a Handler.
type Config struct {
	Namespace string
	Logger    *slog.Logger
	// Timeout bounds one query. Default 10 s.
	Timeout time.Duration
	// JetStream, when set, is read for what it knows of the workers: the workers query, and
	// explain's no_worker.
	JetStream jetstream.JetStream
	// Roster, when set, says which worker processes announced themselves lately (the workers
	// query).
	Roster *presence.Roster
	// Now is the node's clock, the one its commands and fires stamp events with (the database's,
	// store.Clock). Default time.Now.
	Now func() time.Time
}

// Handler answers queries.
type Handler struct {
	cfg     Config
	pool    *pgxpool.Pool
	schemas map[string]*jsonschema.Schema
	tracer  trace.Tracer
}

// Reply is a query's answer: the result, or why there is none.
type Reply struct {
	OK     bool          `json:"ok"`
	Query  string        `json:"query"`
	Result any           `json:"result,omitempty"`
	Error  *apierr.Error `json:"error,omitempty"`
}

// runner decodes a validated body and runs one query.
type runner func(ctx context.Context, h *Handler, body []byte) (any, error)

func runAs[T any](f func(*Handler, context.Context, *T) (any, error)) runner {
	return func(ctx context.Context, h *Handler, body []byte) (any, error) {
		var req T
		if err := apierr.DecodeBody(body, &req, "the query"); err != nil {
			return nil, err
		}
		return f(h, ctx, &req)
	}
}

var runners = map[string]runner{
	"get_job":         runAs((*Handler).getJob),
	"list_jobs":       runAs((*Handler).listJobs),
	"get_trigger":     runAs((*Handler).getTrigger),
	"list_triggers":   runAs((*Handler).listTriggers),
	"next_fire_times": runAs((*Handler).nextFireTimes),
	"history":         runAs((*Handler).history),
	"executing":       runAs((*Handler).executing),
	"list_calendars":  runAs((*Handler).listCalendars),
	"get_calendar":    runAs((*Handler).getCalendar),
	"instances":       runAs((*Handler).instances),
	"explain":         runAs((*Handler).explain),
	"workers":         runAs((*Handler).workers),
}

// Names lists the queries, sorted: internal/node serves each as an endpoint.
func Names() []string { return slices.Sorted(maps.Keys(runners)) }

// New builds a Handler; it fails when a query's schema is missing from the build.
func New(cfg Config, pool *pgxpool.Pool) (*Handler, error) {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat() // "after" must be an RFC 3339 time, reported on its field
	h := &Handler{cfg: cfg, pool: pool, schemas: map[string]*jsonschema.Schema{}, tracer: telemetry.Tracer("query")}
	for _, name := range Names() {
		path := "json/query/" + name + ".json"
		raw, err := fs.ReadFile(schemas.JSON, path)
		if err != nil {
			return nil, fmt.Errorf("reading schema %s: %w", path, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("parsing schema %s: %w", path, err)
		}
		url := "https://agate.dev/schemas/query/" + name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("adding schema %s: %w", path, err)
		}
		if h.schemas[name], err = c.Compile(url); err != nil {
			return nil, fmt.Errorf("compiling schema %s: %w", path, err)
		}
	}
	return h, nil
}

// Handle answers one query. An empty body is read as {}.
func (h *Handler) Handle(ctx context.Context, name string, body []byte) Reply {
	ctx, span := h.tracer.Start(ctx, "agate.query."+name, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	result, err := h.handle(ctx, name, body)
	if err == nil {
		return Reply{OK: true, Query: name, Result: result}
	}
	var e *apierr.Error
	switch {
	case errors.As(err, &e):
	case store.IsTransient(err):
		h.cfg.Logger.WarnContext(ctx, "query could not be answered now", slog.String("query", name), slog.Any("error", err))
		e = &apierr.Error{Code: apierr.CodeUnavailable, Message: "the scheduler could not reach its database in time; retry"}
	default:
		h.cfg.Logger.ErrorContext(ctx, "query failed", slog.String("query", name), slog.Any("error", err))
		e = &apierr.Error{Code: apierr.CodeInternal, Message: "the scheduler failed to answer the query (its log says why)"}
	}
	span.SetStatus(codes.Error, e.Error())
	span.SetAttributes(attribute.String("agate.error_code", e.Code))
	return Reply{OK: false, Query: name, Error: e}
}

func (h *Handler) handle(ctx context.Context, name string, body []byte) (any, error) {
	run, ok := runners[name]
	if !ok {
		return nil, apierr.Invalid("", "unknown query %q", name)
	}
	if len(body) > MaxBodyBytes {
		return nil, apierr.Invalid("", "body is %d bytes; the limit is %d bytes", len(body), MaxBodyBytes)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return nil, apierr.Invalid("", "body is not valid JSON: %v", err)
	}
	if err := h.schemas[name].Validate(inst); err != nil {
		return nil, apierr.FromSchema(err)
	}
	return run(ctx, h, body)
}

// Key names a job or a trigger.
type Key struct {
	Group string `json:"group"`
	Name  string `json:"name"`
}

func (k Key) String() string { return k.Group + "." + k.Name }

// Page is the paging of a list request.
type Page struct {
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// cursor is what an opaque cursor holds: the query it belongs to and the last key returned.
type cursor struct {
	Query string          `json:"q"`
	After json.RawMessage `json:"a"`
}

// decodeCursor reads the key a page starts after into after; false when there is no cursor.
func decodeCursor(query, c string, after any) (bool, error) {
	if c == "" {
		return false, nil
	}
	bad := apierr.Invalid("cursor", "the cursor is not one that %s returned; pass nextCursor as it came", query)
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return false, bad
	}
	var cur cursor
	if json.Unmarshal(raw, &cur) != nil || cur.Query != query || json.Unmarshal(cur.After, after) != nil {
		return false, bad
	}
	return true, nil
}

func encodeCursor(query string, after any) string {
	a, _ := json.Marshal(after) // keys of strings, times and numbers always encode
	raw, _ := json.Marshal(cursor{Query: query, After: a})
	return base64.RawURLEncoding.EncodeToString(raw)
}

// limit is the page size asked for, or the default.
func (p Page) limit(def int) int { return cmp.Or(p.Limit, def) }

// opt is nil for "" (no filter), for the nullable parameters of the SQL filters.
func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// utc is t in UTC, nil stays nil: pgx returns times in the local zone, and the contract writes
// UTC.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
