package webui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/api"
	"github.com/agatesched/agate/internal/devenv/testnode"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/webui"
)

const (
	testToken = "s3cret-token"
	traceURL  = "http://jaeger.test/trace/{traceId}"
)

// cluster is a node with a worker, its UI on an HTTP test server, and a client on its namespace.
type cluster struct {
	n   *testnode.Node
	c   *client.Client
	url string // the UI's page
}

func startCluster(t *testing.T, ns string, ui webui.Config) *cluster {
	t.Helper()
	// Spans are recorded (no exporter), so that each firing has a trace to link to.
	prev := otel.GetTracerProvider()
	tp := sdktrace.NewTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev); _ = tp.Shutdown(context.Background()) })

	local := &api.Local{}
	n := testnode.Start(t, ns, func(c *node.Config) { c.API = local })
	n.StartWorker(t)
	ui.Namespace, ui.API = ns, local
	srv := httptest.NewServer(webui.New(ui))
	t.Cleanup(srv.Close)
	return &cluster{n: n, c: client.New(n.NC, client.Options{Namespace: ns}), url: srv.URL + webui.Prefix}
}

// within polls f until it holds or d passes.
func within(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		<-tick.C
	}
}

// chromium is the browser the test drives: AGATE_CHROMIUM, or Debian's chromium on PATH.
func chromium(t *testing.T) string {
	if p := os.Getenv("AGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium to test the web UI with: run scripts/ensure-chromium.sh (Debian's chromium package), or set AGATE_CHROMIUM")
	return ""
}

// browser is a headless Chromium tab that records every console error and uncaught exception.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	// Not t.TempDir: Chromium's helper processes may still write into the profile for a moment
	// after the browser exited, and t.TempDir fails the test when its removal meets new files.
	profile, err := os.MkdirTemp("", "agate-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-quic", true), chromedp.UserDataDir(profile))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	b := &browser{ctx: ctx}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		// Nothing signals that the helpers are gone: try the removal a few times.
		for range 20 {
			if err = os.RemoveAll(profile); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("leaving Chromium's profile %s: %v", profile, err)
	})
	chromedp.ListenTarget(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			b.errs = append(b.errs, "exception: "+ev.ExceptionDetails.Error())
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				b.errs = append(b.errs, "console.error: "+strings.Join(args, " "))
			}
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.LevelError {
				b.errs = append(b.errs, "log: "+ev.Entry.Text+" "+ev.Entry.URL)
			}
		}
	})
	if err := chromedp.Run(ctx, log.Enable(), runtime.Enable()); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return b
}

// run runs actions with a deadline, failing the test with what was asked.
func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// screenshot writes the page to name.png among the test's artifacts.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	var png []byte
	b.run(t, "screenshot "+name, chromedp.FullScreenshot(&png, 100))
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

func (b *browser) noErrors(t *testing.T, page string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) > 0 {
		t.Fatalf("%s: the browser reported errors:\n%s", page, strings.Join(b.errs, "\n"))
	}
}

// A user's tour of the UI in a real browser: the triggers list, a trigger's next fires with its
// calendar applied, a completed firing in the history linked to its trace, why a paused, a
// blocked and a calendar-excluded trigger did not fire, and the pause button.
func TestUIInABrowser(t *testing.T) {
	cl := startCluster(t, "uitour", webui.Config{Token: testToken, TraceURL: traceURL})
	ctx := t.Context()
	c := cl.c

	// A holiday two days from now: the noon trigger skips it.
	holiday := time.Now().UTC().AddDate(0, 0, 2).Format(time.DateOnly)
	cal, _ := json.Marshal(map[string]any{"type": "holiday", "dates": []string{holiday}, "timeZone": "UTC"})
	if err := c.AddCalendar(ctx, "holidays", cal, false); err != nil {
		t.Fatal(err)
	}
	noon := client.Trigger{Group: "ui", Name: "noon", Cron: &client.CronSchedule{Expression: "0 0 12 * * ?", TimeZone: "UTC"}, Calendar: "holidays"}
	hourly := client.Trigger{Group: "ui", Name: "hourly", Cron: &client.CronSchedule{Expression: "0 0 * * * ?", TimeZone: "UTC"}}
	now := client.Trigger{Group: "ui", Name: "once", Simple: &client.SimpleSchedule{RepeatCount: 0}}
	for _, s := range []client.ScheduleJob{
		{Job: client.Job{Group: "ui", Name: "report", Type: "noop"}, Triggers: []client.Trigger{noon, hourly}},
		{Job: client.Job{Group: "ui", Name: "ping", Type: "noop"}, Triggers: []client.Trigger{now}},
		// A non-concurrent job busy for a minute: its other trigger waits BLOCKED meanwhile.
		{Job: client.Job{Group: "ui", Name: "nap", Type: "sleep", Nonconcurrent: true, Data: map[string]any{"duration": "1m"}},
			Triggers: []client.Trigger{{Group: "ui", Name: "nap-now", Simple: &client.SimpleSchedule{RepeatCount: 0}},
				{Group: "ui", Name: "nap-hourly", Cron: &client.CronSchedule{Expression: "0 30 * * * ?", TimeZone: "UTC"}}}},
	} {
		if _, err := c.ScheduleJob(ctx, s); err != nil {
			t.Fatalf("scheduling %s: %v", s.Job.Name, err)
		}
	}
	// The fire of ui.once completes; ui.nap-hourly goes BLOCKED while ui.nap runs.
	var completed client.Event
	within(t, 20*time.Second, "ui.once's fire completes", func() bool {
		evs, _, err := c.History(ctx, client.Key{Group: "ui", Name: "once"}, true, client.Page{})
		for _, e := range evs {
			if e.Type == "agate.job.completed" {
				completed = e
			}
		}
		return err == nil && completed.ID != ""
	})
	within(t, 20*time.Second, "ui.nap-hourly is BLOCKED", func() bool {
		tr, err := c.GetTrigger(ctx, client.Key{Group: "ui", Name: "nap-hourly"})
		return err == nil && tr.State == "BLOCKED"
	})

	b := newBrowser(t)

	// The list of triggers.
	b.run(t, "the triggers page", chromedp.Navigate(cl.url+"#/triggers"),
		chromedp.WaitVisible(`tr[data-trigger="ui.noon"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-trigger="ui.nap-hourly"] .badge.BLOCKED`, chromedp.ByQuery))
	b.screenshot(t, "triggers")
	b.noErrors(t, "triggers")

	// A trigger's next fires, its calendar applied: ten noons, the holiday's not among them.
	var fires []*cdp.Node
	b.run(t, "ui.noon's page", chromedp.Navigate(cl.url+"#/trigger/ui/noon"),
		chromedp.WaitVisible(`#next-fires li:nth-child(10)`, chromedp.ByQuery),
		chromedp.Nodes(`#next-fires li`, &fires, chromedp.ByQueryAll))
	var texts []string
	for _, n := range fires {
		var s string
		b.run(t, "reading a fire time", chromedp.Text([]cdp.NodeID{n.NodeID}, &s, chromedp.ByNodeID))
		texts = append(texts, s)
	}
	if len(texts) != 10 || !strings.HasSuffix(texts[0], "T12:00:00Z") || strings.Contains(strings.Join(texts, " "), holiday) {
		t.Fatalf("next fires of ui.noon: %q; want 10 noons without %s", texts, holiday)
	}
	b.screenshot(t, "trigger-next-fires")

	// Why did it not fire on the holiday? Its calendar.
	b.run(t, "explaining the holiday", chromedp.Navigate(cl.url+"#/trigger/ui/noon?at="+holiday+"T12:00:00Z"),
		chromedp.WaitVisible(`#explain-reasons li[data-code="calendar_excluded"]`, chromedp.ByQuery))
	var reason string
	b.run(t, "reading the reason", chromedp.Text(`#explain-reasons li[data-code="calendar_excluded"]`, &reason, chromedp.ByQuery))
	if !strings.Contains(reason, "holidays") {
		t.Errorf("the calendar reason %q does not name the calendar", reason)
	}
	b.screenshot(t, "explain-calendar")

	// A completed firing in the history, linked to its trace.
	traceID := strings.Split(completed.TraceParent, "-")
	if len(traceID) != 4 {
		t.Fatalf("the completion in the history has no traceparent: %+v", completed)
	}
	var href string
	var ok bool
	b.run(t, "ui.once's history", chromedp.Navigate(cl.url+"#/trigger/ui/once"),
		chromedp.WaitVisible(`#history tr[data-type="agate.job.completed"] a.trace-link`, chromedp.ByQuery),
		chromedp.AttributeValue(`#history tr[data-type="agate.job.completed"] a.trace-link`, "href", &href, &ok, chromedp.ByQuery))
	if want := strings.Replace(traceURL, "{traceId}", traceID[1], 1); href != want {
		t.Errorf("the completion links to %q; want %q", href, want)
	}
	if !regexp.MustCompile(`/trace/[0-9a-f]{32}$`).MatchString(href) {
		t.Errorf("trace link %q", href)
	}
	b.screenshot(t, "history-trace-link")

	// Blocked: by the running execution of its non-concurrent job.
	b.run(t, "ui.nap-hourly's page", chromedp.Navigate(cl.url+"#/trigger/ui/nap-hourly"),
		chromedp.WaitVisible(`#explain-reasons li[data-code="blocked"]`, chromedp.ByQuery))
	b.screenshot(t, "explain-blocked")

	// The pause button pauses (with the token), and the reason says so.
	b.run(t, "giving the token", chromedp.Navigate(cl.url+"#/trigger/ui/hourly"),
		chromedp.WaitVisible(`#pause`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, testToken, chromedp.ByQuery),
		chromedp.Blur(`#token`, chromedp.ByQuery))
	b.run(t, "pausing", chromedp.Click(`#pause`, chromedp.ByQuery),
		chromedp.WaitVisible(`#state .badge.PAUSED`, chromedp.ByQuery),
		chromedp.WaitVisible(`#explain-reasons li[data-code="paused"]`, chromedp.ByQuery))
	tr, err := c.GetTrigger(ctx, client.Key{Group: "ui", Name: "hourly"})
	if err != nil || tr.State != "PAUSED" {
		t.Fatalf("after the pause button: %v, %v; want PAUSED", tr.State, err)
	}
	b.screenshot(t, "explain-paused")

	// The jobs, and a job's page: its triggers and its history.
	b.run(t, "the jobs page", chromedp.Navigate(cl.url+"#/jobs"),
		chromedp.WaitVisible(`#list a[href="#/job/ui/report"]`, chromedp.ByQuery))
	b.screenshot(t, "jobs")
	b.run(t, "ui.report's page", chromedp.Navigate(cl.url+"#/job/ui/report"),
		chromedp.WaitVisible(`#triggers a[href="#/trigger/ui/noon"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#history tr[data-type="agate.job.added"]`, chromedp.ByQuery))
	b.screenshot(t, "job")

	b.run(t, "the cluster page", chromedp.Navigate(cl.url+"#/cluster"),
		chromedp.WaitVisible(`#instances tbody tr td`, chromedp.ByQuery),
		chromedp.WaitVisible(`#workers tr[data-worker="w1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#job-types tr[data-job-type="noop"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#job-types tr[data-job-type="sleep"]`, chromedp.ByQuery))
	b.screenshot(t, "cluster")
	b.noErrors(t, "the tour")
}

// Writes need the token: none, a wrong one, a read-only UI and a UI without a token are each
// refused with a status and a reason, and nothing changes.
func TestWritesNeedTheToken(t *testing.T) {
	cl := startCluster(t, "uiauth", webui.Config{Token: testToken})
	ctx := t.Context()
	key := client.Key{Group: "auth", Name: "hourly"}
	if _, err := cl.c.ScheduleJob(ctx, client.ScheduleJob{Job: client.Job{Group: "auth", Name: "job", Type: "noop"},
		Triggers: []client.Trigger{{Group: key.Group, Name: key.Name, Cron: &client.CronSchedule{Expression: "0 0 * * * ?"}}}}); err != nil {
		t.Fatal(err)
	}
	body := `{"trigger": {"group": "auth", "name": "hourly"}}`
	readOnly := httptest.NewServer(webui.New(webui.Config{Namespace: "uiauth", Token: testToken, ReadOnly: true}))
	defer readOnly.Close()
	noToken := httptest.NewServer(webui.New(webui.Config{Namespace: "uiauth"}))
	defer noToken.Close()
	for _, c := range []struct {
		name, base, auth string
		status           int
		code             string
	}{
		{"no token", cl.url, "", 401, "unauthenticated"},
		{"a wrong token", cl.url, "Bearer nope", 401, "unauthenticated"},
		{"the token without Bearer", cl.url, testToken, 401, "unauthenticated"},
		{"read-only", readOnly.URL + webui.Prefix, "Bearer " + testToken, 403, "permission_denied"},
		{"no token configured", noToken.URL + webui.Prefix, "Bearer " + testToken, 403, "permission_denied"},
	} {
		status, reply := post(t, c.base+"api/command/pause_trigger", c.auth, body)
		if status != c.status || !strings.Contains(reply, `"code":"`+c.code+`"`) {
			t.Errorf("%s: %d %s; want %d %s", c.name, status, reply, c.status, c.code)
		}
	}
	if tr, err := cl.c.GetTrigger(ctx, key); err != nil || tr.State != "WAITING" {
		t.Fatalf("after refused writes the trigger is %s (%v); want WAITING", tr.State, err)
	}
	// Commands the UI has no button for are refused whatever the token; queries need none.
	if status, reply := post(t, cl.url+"api/command/delete_job", "Bearer "+testToken, `{"job": {"group": "auth", "name": "job"}}`); status != 404 {
		t.Errorf("delete_job through the UI: %d %s; want 404", status, reply)
	}
	if status, reply := post(t, cl.url+"api/query/get_trigger", "", body); status != 200 || !strings.Contains(reply, `"state":"WAITING"`) {
		t.Errorf("get_trigger without a token: %d %s", status, reply)
	}
	// With the token the same command applies, through the same command as agatectl's.
	if status, reply := post(t, cl.url+"api/command/pause_trigger", "Bearer "+testToken, body); status != 200 {
		t.Fatalf("pause with the token: %d %s", status, reply)
	}
	if tr, err := cl.c.GetTrigger(ctx, key); err != nil || tr.State != "PAUSED" {
		t.Fatalf("after the pause the trigger is %s (%v)", tr.State, err)
	}
	evs, _, err := cl.c.History(ctx, key, true, client.Page{})
	if err != nil || len(evs) == 0 || evs[0].Type != "agate.trigger.paused" {
		t.Fatalf("the log's newest event for the trigger: %v, %v; want agate.trigger.paused", evs, err)
	}
}

func post(t *testing.T, url, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	reply, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(reply)
}
