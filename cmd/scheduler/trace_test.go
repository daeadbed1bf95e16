package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/telemetry"
)

// runProducer is the producer process of TestTracesAcrossProcesses (this test binary run with
// AGATE_TRACE_PRODUCER=1): it schedules one one-shot job through the client inside a span of
// its own, exporting its spans as service "producer", and exits once they are flushed.
func runProducer() error {
	ctx := context.Background()
	shutdown, err := telemetry.Setup(ctx, "producer")
	if err != nil {
		return err
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		return err
	}
	defer nc.Close()
	c := client.New(nc, client.Options{Namespace: os.Getenv("AGATE_NAMESPACE")})
	sctx, span := telemetry.Tracer("producer").Start(ctx, "producer.schedule")
	_, err = c.ScheduleJob(sctx, client.ScheduleJob{
		Job:      client.Job{Group: "traced", Name: "job", Type: "noop"},
		Triggers: []client.Trigger{client.OneShot("traced", "once", time.Now())},
	})
	span.End()
	if serr := shutdown(ctx); err == nil {
		err = serr
	}
	return err
}

// span is what the test's OTLP receiver keeps of an exported span.
type span struct {
	service, name     string
	trace, id, parent string   // hex; parent "" for a root
	links             []string // "trace/span" of each link
	attrs             map[string]string
}

// receiver is an OTLP/HTTP trace receiver (POST /v1/traces, protobuf): it keeps the spans it
// is sent and says so on changed.
type receiver struct {
	mu      sync.Mutex
	spans   []span
	changed chan struct{}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []span
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := span{service: service, name: s.Name, trace: hex.EncodeToString(s.TraceId),
					id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId), attrs: map[string]string{}}
				for _, l := range s.Links {
					sp.links = append(sp.links, hex.EncodeToString(l.TraceId)+"/"+hex.EncodeToString(l.SpanId))
				}
				for _, kv := range s.Attributes {
					v := kv.GetValue()
					switch {
					case v.GetStringValue() != "":
						sp.attrs[kv.Key] = v.GetStringValue()
					default:
						sp.attrs[kv.Key] = fmt.Sprint(v.GetIntValue())
					}
				}
				got = append(got, sp)
			}
		}
	}
	rc.mu.Lock()
	rc.spans = append(rc.spans, got...)
	rc.mu.Unlock()
	select {
	case rc.changed <- struct{}{}:
	default:
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// named returns the spans received so far with the given name.
func (rc *receiver) named(name string) []span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []span
	for _, s := range rc.spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

func (rc *receiver) all() []span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]span(nil), rc.spans...)
}

// child is a child process whose output is kept for failure messages.
type child struct {
	name string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startChild(t *testing.T, name string, env []string, exe string, args ...string) *child {
	t.Helper()
	p := &child{name: name, cmd: exec.Command(exe, args...), out: &lockedBuffer{}, done: make(chan error, 1)}
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = env, p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting the %s: %v", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit (the process flushes its spans on the way out).
func (p *child) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("signalling the %s: %v", p.name, err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		if err != nil {
			t.Errorf("the %s exited with %v after SIGTERM; output:\n%s", p.name, err, p.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the %s did not exit after SIGTERM; output:\n%s", p.name, p.out.String())
	}
}

// otelFree is the environment without OTEL_* variables, plus env.
func otelFree(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// TestTracesAcrossProcesses runs a producer, a scheduler and a worker as three processes
// exporting their spans to an OTLP receiver in the test, schedules one one-shot job and checks
// the traces: the scheduling span is a child of the producer's request span; the fire is a
// trace of its own whose root, the fire span, links to the scheduling span; the outbox publish
// and the worker's run are children of the fire span, and the completion of the run span.
func TestTracesAcrossProcesses(t *testing.T) {
	rc := &receiver{changed: make(chan struct{}, 1)}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)

	// The worker is its own binary: build it (most of it is in the build cache already).
	workerExe := filepath.Join(t.TempDir(), "worker")
	build := exec.Command("go", "build", "-o", workerExe, "github.com/agatesched/agate/cmd/worker")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the worker: %v\n%s", err, out)
	}

	natsURL, ns := testenv.NATS(t), testenv.Namespace(t)
	common := []string{"NATS_URL=" + natsURL, "AGATE_NAMESPACE=" + ns,
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + srv.URL, "OTEL_BSP_SCHEDULE_DELAY=50"}
	sched := startChild(t, "scheduler", otelFree(append(common, "AGATE_SCHEDULER_RUN_MAIN=1",
		"DATABASE_URL="+testenv.MigratedDatabase(t))...), os.Args[0], "run", "--instance-id", "trace-node")
	wrk := startChild(t, "worker", otelFree(append(common, "AGATE_INSTANCE_ID=trace-worker")...), workerExe)

	// The producer schedules the job; its client retries until the scheduler answers.
	producer := exec.Command(os.Args[0])
	producer.Env = otelFree(append(common, "AGATE_TRACE_PRODUCER=1")...)
	if out, err := producer.CombinedOutput(); err != nil {
		t.Fatalf("producer: %v\n%s", err, out)
	}

	// Wait for the firing's spans: the fire, its publish, the run and the completion.
	firingDone := func() bool {
		fires := rc.named("agate.fire")
		if len(fires) == 0 {
			return false
		}
		for _, name := range []string{"agate.publish", "agate.job.run", "agate.complete"} {
			found := false
			for _, s := range rc.named(name) {
				found = found || s.trace == fires[0].trace
			}
			if !found {
				return false
			}
		}
		return true
	}
	deadline := time.After(60 * time.Second)
	for !firingDone() {
		select {
		case <-rc.changed:
		case err := <-sched.done:
			t.Fatalf("the scheduler exited: %v\n%s", err, sched.out.String())
		case err := <-wrk.done:
			t.Fatalf("the worker exited: %v\n%s", err, wrk.out.String())
		case <-deadline:
			t.Fatalf("no completion span after 60s; spans: %v\nscheduler:\n%s\nworker:\n%s", names(rc.all()),
				sched.out.String(), wrk.out.String())
		}
	}
	wrk.stop(t)
	sched.stop(t)

	one := func(name, service string, where func(span) bool) span {
		t.Helper()
		var found []span
		for _, s := range rc.named(name) {
			if where == nil || where(s) {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d %s spans, want 1; spans: %v", len(found), name, names(rc.all()))
		}
		if found[0].service != service {
			t.Errorf("%s span of service %q, want %q", name, found[0].service, service)
		}
		return found[0]
	}
	childOf := func(child, parent span) {
		t.Helper()
		if child.trace != parent.trace || child.parent != parent.id {
			t.Errorf("%s span (trace %s, parent %s) is not a child of %s span (trace %s, id %s)",
				child.name, child.trace, child.parent, parent.name, parent.trace, parent.id)
		}
	}

	// The producer's trace: its span, the client's request, the scheduler's command.
	root := one("producer.schedule", "producer", nil)
	request := one("agate.client.schedule_job", "producer", nil)
	childOf(request, root)
	scheduling := one("agate.command.schedule_job", "agate-scheduler", nil)
	childOf(scheduling, request)

	// The firing's trace: a new one, rooted at the fire span, which links to the scheduling span.
	fire := one("agate.fire", "agate-scheduler", nil)
	if fire.trace == scheduling.trace {
		t.Errorf("the fire span is in the scheduling command's trace %s; want a trace of its own", fire.trace)
	}
	if fire.parent != "" {
		t.Errorf("the fire span has parent %s; want a root span", fire.parent)
	}
	if want := scheduling.trace + "/" + scheduling.id; len(fire.links) != 1 || fire.links[0] != want {
		t.Errorf("the fire span links to %v; want the scheduling span %s", fire.links, want)
	}
	for k, v := range map[string]string{"messaging.system": "nats", "messaging.operation.type": "create",
		"db.system.name": "postgresql", "agate.job": "traced.job", "agate.trigger": "traced.once", "agate.fire.batch_size": "1"} {
		if fire.attrs[k] != v {
			t.Errorf("fire span attribute %s = %q, want %q", k, fire.attrs[k], v)
		}
	}
	if fire.attrs["agate.fire_id"] == "" || !strings.HasPrefix(fire.attrs["messaging.destination.name"], "agate."+ns+".") {
		t.Errorf("fire span attributes %v: want agate.fire_id and the JobFired subject", fire.attrs)
	}
	inFire := func(s span) bool { return s.trace == fire.trace }
	publish := one("agate.publish", "agate-scheduler", inFire)
	childOf(publish, fire)
	run := one("agate.job.run", "agate-worker", inFire)
	childOf(run, fire)
	if run.attrs["agate.fire_id"] != fire.attrs["agate.fire_id"] || run.attrs["messaging.operation.type"] != "process" {
		t.Errorf("run span attributes %v: want the fire's id and operation type process", run.attrs)
	}
	complete := one("agate.complete", "agate-scheduler", inFire)
	childOf(complete, run)
	if complete.attrs["agate.fire_id"] != fire.attrs["agate.fire_id"] || complete.attrs["agate.outcome"] != "agate.job.completed" {
		t.Errorf("completion span attributes %v: want the fire's id and a completed outcome", complete.attrs)
	}
	for _, s := range rc.all() {
		if s.trace == fire.trace && s.parent == "" && s.id != fire.id {
			t.Errorf("a second root %s in the firing's trace", s.name)
		}
		switch s.service {
		case "producer", "agate-scheduler", "agate-worker":
		default:
			t.Errorf("span %s has service.name %q", s.name, s.service)
		}
	}
}

func names(spans []span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.service+":"+s.name)
	}
	return out
}
