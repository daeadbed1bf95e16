// Package webui is the scheduler's web UI, served under /ui/ on its --http listener: jobs and
// triggers with their state and next fire times, a trigger's upcoming fires, a job's or
// trigger's history from the event log with links to each firing's trace, the cluster's nodes
// and workers, and "why didn't it fire?" (the explain query). Its pages are plain HTML, CSS and
// JavaScript embedded in the binary: no build step, no CDN, it works offline.
//
// The pages read through the node's own queries and steer through its own commands, called in
// process (internal/api's Local): the same validation, the same events in the log as the
// commands agatectl sends over NATS. Reads are open to whoever reaches the listener (it binds to
// loopback unless told otherwise); writes need the configured token, and none is accepted when
// no token is configured or the UI is read-only.
package webui

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/api"
	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/httpserve"
)

//go:embed assets
var assets embed.FS

// Prefix is where the UI is served.
const Prefix = "/ui/"

// Writes are the commands the UI's buttons send; every other command is refused here, whatever
// the token (agatectl and the client send them).
var Writes = []string{"pause_trigger", "resume_trigger", "trigger_job", "interrupt_job"}

// maxBody bounds a request body, as the contract bounds a command's or a query's.
const maxBody = 64 << 10

// callTimeout bounds one query or command, as the client's request timeout does.
const callTimeout = 10 * time.Second

// Config configures the UI.
type Config struct {
	Namespace string
	// API answers the node's queries and commands in process.
	API *api.Local
	// Token is what write actions must present ("Authorization: Bearer <token>"). Empty: no
	// write is accepted.
	Token string
	// ReadOnly refuses every write, token or not.
	ReadOnly bool
	// TraceURL links a firing to its trace: "{traceId}" is replaced by the trace's id, e.g.
	// http://localhost:16686/trace/{traceId} for Jaeger. Empty: no links.
	TraceURL string
	Logger   *slog.Logger
}

// UI serves the pages and their JSON endpoints.
type UI struct {
	cfg    Config
	log    *slog.Logger
	writes map[string]bool
	mux    *http.ServeMux
}

// New returns the UI; mount Handler under Prefix.
func New(cfg Config) *UI {
	u := &UI{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), writes: map[string]bool{}, mux: http.NewServeMux()}
	for _, w := range Writes {
		u.writes[w] = true
	}
	static, _ := fs.Sub(assets, "assets") // the directory is embedded: Sub cannot fail
	files := http.StripPrefix(Prefix, http.FileServerFS(static))
	u.mux.Handle("GET "+Prefix, files)
	u.mux.HandleFunc("GET "+Prefix+"api/config", u.config)
	u.mux.HandleFunc("POST "+Prefix+"api/query/{name}", u.query)
	u.mux.HandleFunc("POST "+Prefix+"api/command/{name}", u.command)
	return u
}

// Serve mounts a UI on srv (when srv is nil, a process without a listener, nothing is served)
// and returns the Local its node must answer through (node.Config's API).
func Serve(srv *httpserve.Server, cfg Config) *api.Local {
	cfg.API = cmp.Or(cfg.API, &api.Local{})
	if srv == nil {
		return cfg.API
	}
	u := New(cfg)
	srv.Handle(Prefix, u)
	srv.Handle("GET /{$}", http.RedirectHandler(Prefix, http.StatusFound))
	url, _ := httpserve.URL(srv.Addr(), Prefix) // the listener's own address: valid
	u.log.Info("serving the web UI", slog.String("url", url), slog.String("writes", u.settings().Writes))
	return cfg.API
}

// ServeHTTP serves the UI, with headers that keep its pages from being framed or from loading
// anything but their own files.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	u.mux.ServeHTTP(w, r)
}

// settings is what the pages need to know of the configuration; never the token.
type settings struct {
	Namespace string `json:"namespace"`
	// Writes: "token" (write actions need the token), "off" (no token is configured) or
	// "read-only".
	Writes   string   `json:"writes"`
	Commands []string `json:"commands"`
	TraceURL string   `json:"traceUrl,omitempty"`
}

func (u *UI) settings() settings {
	s := settings{Namespace: u.cfg.Namespace, Writes: "token", Commands: Writes, TraceURL: u.cfg.TraceURL}
	switch {
	case u.cfg.ReadOnly:
		s.Writes = "read-only"
	case u.cfg.Token == "":
		s.Writes = "off"
	}
	return s
}

func (u *UI) config(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, u.settings())
}

// query answers a query as the NATS endpoint would: the same reply body.
func (u *UI) query(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if u.cfg.API.Kind(name) != "query" {
		u.fail(w, http.StatusNotFound, &apierr.Error{Code: apierr.CodeNotFound, Message: name + " is not a query"})
		return
	}
	body, ok := u.body(w, r)
	if !ok {
		return
	}
	u.call(w, r, name, body)
}

// command sends one of the UI's commands, once the request shows the token.
func (u *UI) command(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !u.writes[name] {
		u.fail(w, http.StatusNotFound, &apierr.Error{Code: apierr.CodeNotFound,
			Message: name + " is not one of the UI's commands (" + strings.Join(Writes, ", ") + "); send it with agatectl"})
		return
	}
	if status, e := u.authorize(r); e != nil {
		u.log.WarnContext(r.Context(), "web UI write refused", slog.String("command", name), slog.String("remote", r.RemoteAddr),
			slog.String("reason", e.Message))
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agate"`)
		}
		u.fail(w, status, e)
		return
	}
	body, ok := u.body(w, r)
	if !ok {
		return
	}
	body, err := client.WithID(json.RawMessage(body))
	if err != nil {
		u.fail(w, http.StatusBadRequest, apierr.Invalid("", "%v", err))
		return
	}
	// An audit line: the log says who steered what from the UI (never the token).
	u.log.InfoContext(r.Context(), "web UI command", slog.String("command", name), slog.String("remote", r.RemoteAddr))
	u.call(w, r, name, body)
}

// Codes of a refused write, in the style of the contract's codes.
const (
	codeUnauthenticated  = "unauthenticated"
	codePermissionDenied = "permission_denied"
)

// authorize checks that writes are on and that r carries the token.
func (u *UI) authorize(r *http.Request) (int, *apierr.Error) {
	switch {
	case u.cfg.ReadOnly:
		return http.StatusForbidden, &apierr.Error{Code: codePermissionDenied, Message: "this UI is read-only (--ui-read-only)"}
	case u.cfg.Token == "":
		return http.StatusForbidden, &apierr.Error{Code: codePermissionDenied,
			Message: "write actions are off: the scheduler has no UI token (set AGATE_UI_TOKEN)"}
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(u.cfg.Token)) != 1 {
		return http.StatusUnauthorized, &apierr.Error{Code: codeUnauthenticated,
			Message: "write actions need the UI token (Authorization: Bearer <token>); this request has none or a wrong one"}
	}
	return 0, nil
}

func (u *UI) call(w http.ResponseWriter, r *http.Request, name string, body []byte) {
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	// An answer is 200 whatever it says, as over NATS: "ok": false with the contract's error
	// (a trigger not found is an answer, not a failed request). HTTP statuses are for what
	// kept the request from being answered.
	reply, _, err := u.cfg.API.Call(ctx, name, body)
	if errors.Is(err, api.ErrNotServing) {
		u.fail(w, http.StatusServiceUnavailable, &apierr.Error{Code: apierr.CodeUnavailable, Message: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(reply)
}

// body reads a request body of at most maxBody bytes; an empty one is {}.
func (u *UI) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		u.fail(w, http.StatusRequestEntityTooLarge, apierr.Invalid("", "the body is larger than %d bytes", maxBody))
		return nil, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	return body, true
}

func (u *UI) fail(w http.ResponseWriter, status int, e *apierr.Error) {
	writeJSON(w, status, map[string]any{"ok": false, "error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
