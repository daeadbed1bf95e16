package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agatesched/agate/internal/trigger"
)

// BuiltinOptions configures the built-in job types. The zero value is usable.
type BuiltinOptions struct {
	// HTTPClient sends the requests of http jobs. Default: a client with no overall timeout (the
	// job's timeout and data.timeout bound each request) that follows at most 10 redirects, uses
	// no proxy and refuses to connect to loopback, link-local, cloud metadata and unspecified
	// addresses unless HTTPAllow allows them (httpguard.go). A client given here is used as is:
	// neither that guard nor HTTPAllow applies to it.
	HTTPClient *http.Client
	// HTTPAllow lists the destinations, refused by default, that http jobs may reach anyway
	// (cmd/worker's --http-allow). Private ranges such as 10.0.0.0/8 need no entry.
	HTTPAllow HTTPAllowList
	// MaxResponseBytes bounds how much of an http job's response body is read. Default 64 KiB.
	MaxResponseBytes int64

	// dialControl, if set, runs after the guard on every connection of the default client (tests).
	dialControl func(network, address string, c syscall.RawConn) error
}

// Built-in job type names.
const (
	TypeNoop  = "noop"
	TypeSleep = "sleep"
	TypeLog   = "log"
	TypeHTTP  = "http"
)

// RegisterBuiltins registers noop, sleep, log and http. There is no job type that runs shell
// commands: a worker that needs one registers its own handler, with its own
// allow-list.
func RegisterBuiltins(r *Registry, opts BuiltinOptions) {
	if opts.HTTPClient == nil {
		opts.HTTPClient = newGuardedClient(opts.HTTPAllow, opts.dialControl)
	}
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = 64 << 10
	}
	r.Register(TypeNoop, func(context.Context, Job) error { return nil })
	r.Register(TypeSleep, sleepJob)
	r.Register(TypeLog, logJob)
	h := httpJob{client: opts.HTTPClient, maxBody: opts.MaxResponseBytes}
	r.Register(TypeHTTP, h.run)
}

// decodeData reads a job's data into v, refusing unknown fields so a misspelt option fails the
// job instead of being ignored. A bad payload will not get better by retrying: Permanent.
func decodeData(job Job, v any) error {
	data := bytes.TrimSpace(job.Data)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Permanent(fmt.Errorf("%s job data is invalid: %w", job.Job.Type, err))
	}
	return nil
}

// sleepJob waits for data.duration ("1.5s", "PT1.5S"), or until ctx ends.
func sleepJob(ctx context.Context, job Job) error {
	var data struct {
		Duration string `json:"duration"`
	}
	if err := decodeData(job, &data); err != nil {
		return err
	}
	d, err := trigger.ParseDuration(data.Duration)
	if err != nil || d < 0 {
		return Permanent(fmt.Errorf("sleep job data.duration %q is not a non-negative duration such as \"10s\" or \"PT10S\"", data.Duration))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sleep of %s interrupted: %w", d, context.Cause(ctx))
	}
}

// logJob writes data.message to the worker's log at info level.
func logJob(ctx context.Context, job Job) error {
	var data struct {
		Message string `json:"message"`
	}
	if err := decodeData(job, &data); err != nil {
		return err
	}
	if data.Message == "" {
		return Permanent(errors.New("log job needs data.message"))
	}
	job.Logger.InfoContext(ctx, data.Message)
	return nil
}

type httpJob struct {
	client  *http.Client
	maxBody int64
}

// httpData is the data of an http job.
type httpData struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Timeout string            `json:"timeout"`
}

// run sends one request. A 2xx status completes the job. 408, 429 and 5xx fail it and are
// retried; any other status (a 4xx the target will keep answering, a 3xx it did not let us
// follow) fails it permanently. Errors name the method, the URL without credentials or query,
// and the status, never the headers or the body sent.
func (h httpJob) run(ctx context.Context, job Job) error {
	var data httpData
	if err := decodeData(job, &data); err != nil {
		return err
	}
	u, err := url.Parse(data.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Permanent(fmt.Errorf("http job data.url %q must be an absolute http:// or https:// URL", redactURLString(data.URL)))
	}
	method := strings.ToUpper(data.Method)
	if method == "" {
		method = http.MethodGet
	}
	if data.Timeout != "" {
		d, err := trigger.ParseDuration(data.Timeout)
		if err != nil || d <= 0 {
			return Permanent(fmt.Errorf("http job data.timeout %q is not a positive duration such as \"30s\" or \"PT30S\"", data.Timeout))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	where := method + " " + redactURL(u)

	var body io.Reader
	if data.Body != "" {
		body = strings.NewReader(data.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return Permanent(fmt.Errorf("http %s: building request: %w", where, err))
	}
	for k, v := range data.Headers {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		// url.Error repeats the full URL (with its query); report ours instead, and the URL of
		// the redirect that failed, if one did, redacted as ours.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
			if r := redactURLString(ue.URL); r != redactURL(u) {
				where += " (redirected to " + r + ")"
			}
		}
		// A refused destination stays refused: tell the operator how to allow it, once.
		var refused *DestinationRefusedError
		if errors.As(err, &refused) {
			return Permanent(fmt.Errorf("http %s: %w", where, refused))
		}
		return fmt.Errorf("http %s: %w", where, err)
	}
	defer resp.Body.Close()
	// Read (a bounded part of) the body so the connection can be reused, and to quote it on failure.
	head, err := io.ReadAll(io.LimitReader(resp.Body, h.maxBody))
	if err != nil && resp.StatusCode/100 == 2 {
		return fmt.Errorf("http %s: reading response: %w", where, err)
	}
	if resp.StatusCode/100 == 2 {
		job.Logger.DebugContext(ctx, "http job answered", "status", resp.StatusCode, "bytes_read", len(head))
		return nil
	}
	err = fmt.Errorf("http %s: status %s%s", where, resp.Status, quoteBody(head))
	switch {
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return err
	default:
		return Permanent(err)
	}
}

// quoteBody returns ": <the start of the body>" for an error message, or "".
func quoteBody(b []byte) string {
	const max = 200
	if len(b) > max {
		n := max
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		b = b[:n]
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	if s == "" {
		return ""
	}
	return ": " + s
}

// redactURL is u without user info, query or fragment: those may carry credentials and end up
// in events and logs.
func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = "", false, "", ""
	return c.String()
}

func redactURLString(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL)"
	}
	return redactURL(u)
}
