package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/worker"
)

// builtin returns the handler of a built-in type.
func builtin(t *testing.T, typ string) worker.HandlerFunc {
	t.Helper()
	reg := worker.NewRegistry()
	worker.RegisterBuiltins(reg, worker.BuiltinOptions{MaxResponseBytes: 1024})
	h, ok := reg.Handler(typ)
	if !ok {
		t.Fatalf("no built-in %s handler", typ)
	}
	return h
}

func job(typ, data string, log *slog.Logger) worker.Job {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return worker.Job{
		JobFired: events.JobFired{Job: events.JobRef{Group: "g", Name: "n", Type: typ}, Data: json.RawMessage(data)},
		Attempt:  1,
		Logger:   log,
	}
}

// request is what newHTTPServer saw.
type request struct {
	method, path, auth, body string
}

// newHTTPServer answers /ok with 204, /fail with 500, /missing with 404 and /big with a large body;
// every request it receives is sent on the returned server's channel.
func newHTTPServer(t *testing.T) *httpServer {
	s := &httpServer{requests: make(chan request, 16)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.requests <- request{r.Method, r.URL.Path, r.Header.Get("Authorization"), string(b)}
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusNoContent)
		case "/fail":
			http.Error(w, "database is down", http.StatusInternalServerError)
		case "/missing":
			http.NotFound(w, r)
		case "/big":
			_, _ = w.Write(bytes.Repeat([]byte("x"), 1<<20))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

type httpServer struct {
	*httptest.Server
	requests chan request
}

func TestHTTPJob(t *testing.T) {
	srv := newHTTPServer(t)
	h := httpHandler(t, "127.0.0.1/32") // httptest listens on loopback, refused by default
	ctx := context.Background()

	err := h(ctx, job("http", `{"method":"post","url":"`+srv.URL+`/ok?token=s3cret","headers":{"Authorization":"Bearer abc"},"body":"hello","timeout":"5s"}`, nil))
	if err != nil {
		t.Fatalf("POST /ok: %v", err)
	}
	if r := <-srv.requests; r != (request{"POST", "/ok", "Bearer abc", "hello"}) {
		t.Errorf("server saw %+v", r)
	}

	if err := h(ctx, job("http", `{"url":"`+srv.URL+`/big"}`, nil)); err != nil {
		t.Errorf("GET /big (body larger than the read bound): %v", err)
	}
	<-srv.requests

	err = h(ctx, job("http", `{"url":"`+srv.URL+`/fail?token=s3cret"}`, nil))
	if err == nil || worker.IsPermanent(err) || !strings.Contains(err.Error(), "500") ||
		!strings.Contains(err.Error(), "database is down") || !strings.Contains(err.Error(), srv.URL+"/fail") {
		t.Errorf("GET /fail: error %v; want a retryable error naming the URL, status 500 and the body", err)
	}
	if err != nil && strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q leaks the URL's query", err)
	}
	<-srv.requests

	err = h(ctx, job("http", `{"url":"`+srv.URL+`/missing"}`, nil))
	if err == nil || !worker.IsPermanent(err) || !strings.Contains(err.Error(), "404") {
		t.Errorf("GET /missing: error %v; want a permanent error naming status 404", err)
	}
	<-srv.requests

	for _, data := range []string{
		`{"url":"file:///etc/passwd"}`,
		`{"url":"ftp://example.com/x"}`,
		`{"url":"/relative"}`,
		`{}`,
		`{"url":"` + srv.URL + `/ok","timeout":"soon"}`,
		`{"url":"` + srv.URL + `/ok","command":"rm -rf /"}`,
	} {
		err := h(ctx, job("http", data, nil))
		if err == nil || !worker.IsPermanent(err) {
			t.Errorf("data %s: error %v, want a permanent error", data, err)
		}
	}
	select {
	case r := <-srv.requests:
		t.Errorf("invalid data still sent a request: %+v", r)
	default:
	}

	// Credentials in the URL never reach the error message.
	err = h(ctx, job("http", `{"url":"http://user:pw@127.0.0.1:1/x?key=k"}`, nil))
	if err == nil || strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "key=k") {
		t.Errorf("unreachable URL with credentials: error %v; want an error without them", err)
	}
}

func TestSleepJob(t *testing.T) {
	h := builtin(t, worker.TypeSleep)
	for _, d := range []string{"10ms", "PT0.01S"} {
		if err := h(context.Background(), job("sleep", `{"duration":"`+d+`"}`, nil)); err != nil {
			t.Errorf("sleep %s: %v", d, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := h(ctx, job("sleep", `{"duration":"1h"}`, nil)); !errors.Is(err, context.Canceled) {
		t.Errorf("sleep 1h with a cancelled context: %v, want context.Canceled", err)
	}
	if time.Since(start) > time.Second {
		t.Error("sleep ignored its context")
	}
	for _, data := range []string{`{}`, `{"duration":"forever"}`, `{"duration":"-1s"}`} {
		if err := h(context.Background(), job("sleep", data, nil)); !worker.IsPermanent(err) {
			t.Errorf("sleep %s: %v, want a permanent error", data, err)
		}
	}
}

func TestLogAndNoopJobs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	if err := builtin(t, worker.TypeLog)(context.Background(), job("log", `{"message":"hello from a job"}`, log)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "hello from a job") {
		t.Errorf("log output %q lacks the message", buf.String())
	}
	if err := builtin(t, worker.TypeLog)(context.Background(), job("log", `{}`, log)); !worker.IsPermanent(err) {
		t.Errorf("log without message: %v, want a permanent error", err)
	}
	if err := builtin(t, worker.TypeNoop)(context.Background(), job("noop", ``, nil)); err != nil {
		t.Errorf("noop: %v", err)
	}
}

func TestRegistry(t *testing.T) {
	reg := worker.NewRegistry()
	worker.RegisterBuiltins(reg, worker.BuiltinOptions{})
	if got := strings.Join(reg.Types(), ","); got != "http,log,noop,sleep" {
		t.Errorf("Types() = %s", got)
	}
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	noop := func(context.Context, worker.Job) error { return nil }
	mustPanic("duplicate", func() { reg.Register("noop", noop) })
	mustPanic("bad name", func() { reg.Register("a.b", noop) })
	mustPanic("empty name", func() { reg.Register("", noop) })
	mustPanic("nil handler", func() { reg.Register("x", nil) })
	if _, ok := reg.Handler("shell"); ok {
		t.Error("a shell job type is registered")
	}

	base := errors.New("boom")
	p := worker.Permanent(base)
	if !worker.IsPermanent(p) || !errors.Is(p, base) || worker.IsPermanent(base) || worker.Permanent(nil) != nil {
		t.Error("Permanent/IsPermanent disagree")
	}
}
