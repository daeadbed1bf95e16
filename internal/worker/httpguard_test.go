package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/agatesched/agate/internal/worker"
)

// loopbackOnly is the tests' safety net behind the destination guard: it refuses every
// connection to an address that is not loopback, so that a guard that lets too much through
// fails a test instead of sending traffic to another host.
func loopbackOnly(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		return fmt.Errorf("test safety net: %s is not loopback, and the guard let it through", address)
	}
	return nil
}

// guardedOptions are the options of an http handler allowing allow (ParseHTTPAllowList's
// syntax), with the safety net.
func guardedOptions(t *testing.T, allow string) worker.BuiltinOptions {
	t.Helper()
	a, err := worker.ParseHTTPAllowList(allow)
	if err != nil {
		t.Fatalf("allow-list %q: %v", allow, err)
	}
	return worker.WithDialControl(worker.BuiltinOptions{MaxResponseBytes: 1024, HTTPAllow: a}, loopbackOnly)
}

// httpHandler is the http job handler allowing allow, with the safety net.
func httpHandler(t *testing.T, allow string) worker.HandlerFunc {
	t.Helper()
	reg := worker.NewRegistry()
	worker.RegisterBuiltins(reg, guardedOptions(t, allow))
	h, _ := reg.Handler(worker.TypeHTTP)
	return h
}

// listenHTTP starts a server for h on addr ("127.0.0.2:0", "[::1]:0"), or skips the test if
// this machine cannot listen there.
func listenHTTP(t *testing.T, network, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s here (%v); skipping this case", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// port is the port of a server's URL.
func port(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func noRequest(t *testing.T, srv *httpServer) {
	t.Helper()
	select {
	case r := <-srv.requests:
		t.Errorf("a refused destination received a request: %+v", r)
	default:
	}
}

func TestHTTPJobRefusesLocalDestinationsByDefault(t *testing.T) {
	ctx := context.Background()
	h := httpHandler(t, "")
	want := func(dest, what, allow string) string {
		return "destination " + dest + " is " + what + ", which http jobs may not reach; allow it with --http-allow " + allow + " (AGATE_HTTP_ALLOW)"
	}

	t.Run("127.0.0.1", func(t *testing.T) {
		srv := newHTTPServer(t)
		p := port(t, srv.URL)
		err := h(ctx, job("http", `{"url":"http://user:pw@127.0.0.1:`+p+`/ok?token=s3cret"}`, nil))
		exact := "http GET http://127.0.0.1:" + p + "/ok: " + want("127.0.0.1", "a loopback address", "127.0.0.1/32")
		if err == nil || err.Error() != exact || !worker.IsPermanent(err) {
			t.Errorf("error %v (permanent %t)\nwant permanent %s", err, worker.IsPermanent(err), exact)
		}
		noRequest(t, srv)
	})

	t.Run("[::1]", func(t *testing.T) {
		got := make(chan struct{}, 1)
		srv := listenHTTP(t, "tcp6", "[::1]:0", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got <- struct{}{} }))
		err := h(ctx, job("http", `{"url":"`+srv.URL+`/x"}`, nil))
		exact := "http GET " + srv.URL + "/x: " + want("::1", "a loopback address", "::1/128")
		if err == nil || err.Error() != exact || !worker.IsPermanent(err) {
			t.Errorf("error %v\nwant permanent %s", err, exact)
		}
		if len(got) > 0 {
			t.Error("the refused server received a request")
		}
	})

	// Nothing listens on these: the dial is refused before any connection (and the safety net
	// would refuse it if the guard did not).
	for _, tc := range []struct{ url, dest, what, allow string }{
		{"http://169.254.169.254/latest/meta-data/iam/security-credentials/", "169.254.169.254", "a cloud metadata address", "169.254.169.254/32"},
		{"http://[fd00:ec2::254]/latest/meta-data/", "fd00:ec2::254", "a cloud metadata address", "fd00:ec2::254/128"},
		{"http://100.100.100.200/latest/meta-data/", "100.100.100.200", "a cloud metadata address", "100.100.100.200/32"},
		{"http://169.254.10.1:8080/", "169.254.10.1", "a link-local address", "169.254.10.1/32"},
		{"http://[fe80::1]:8080/", "fe80::1", "a link-local address", "fe80::1/128"},
		{"http://0.0.0.0:8080/", "0.0.0.0", "an unspecified address", "0.0.0.0/32"},
		{"http://[::]:8080/", "::", "an unspecified address", "::/128"},
		{"http://[::ffff:127.0.0.1]:8080/", "127.0.0.1", "a loopback address", "127.0.0.1/32"},
		{"http://127.9.9.9:8080/", "127.9.9.9", "a loopback address", "127.9.9.9/32"},
	} {
		u, _ := url.Parse(tc.url)
		t.Run(u.Hostname(), func(t *testing.T) {
			err := h(ctx, job("http", `{"url":"`+tc.url+`","timeout":"5s"}`, nil))
			var refused *worker.DestinationRefusedError
			if err == nil || !worker.IsPermanent(err) || !errors.As(err, &refused) ||
				!strings.HasSuffix(err.Error(), ": "+want(tc.dest, tc.what, tc.allow)) {
				t.Errorf("%s: error %v\nwant a permanent error ending %q", tc.url, err, want(tc.dest, tc.what, tc.allow))
			}
		})
	}

	t.Run("localhost", func(t *testing.T) {
		srv := newHTTPServer(t)
		err := h(ctx, job("http", `{"url":"http://localhost:`+port(t, srv.URL)+`/ok"}`, nil))
		// localhost may resolve to ::1 or 127.0.0.1 first; either is refused, naming the host.
		if err == nil || !worker.IsPermanent(err) || !strings.Contains(err.Error(), "destination localhost (") ||
			!strings.Contains(err.Error(), "is a loopback address") || !strings.Contains(err.Error(), "--http-allow localhost or --http-allow ") {
			t.Errorf("error %v; want a permanent refusal naming localhost", err)
		}
		noRequest(t, srv)
	})
}

func TestHTTPJobAllowsPrivateRangesByDefault(t *testing.T) {
	h := httpHandler(t, "")
	for _, u := range []string{"http://10.1.2.3:8080/", "http://172.16.0.1/", "http://192.168.1.1/", "http://[fd12::1]/"} {
		// The guard lets these through; the safety net then stops the dial, so nothing is sent.
		err := h(context.Background(), job("http", `{"url":"`+u+`","timeout":"5s"}`, nil))
		if err == nil || !strings.Contains(err.Error(), "test safety net") || worker.IsPermanent(err) {
			t.Errorf("%s: error %v; want the guard to allow it (and the test's safety net to stop it)", u, err)
		}
	}
}

func TestHTTPJobAllowList(t *testing.T) {
	ctx := context.Background()
	srv := newHTTPServer(t)
	p := port(t, srv.URL)

	t.Run("CIDR", func(t *testing.T) {
		h := httpHandler(t, "127.0.0.0/8")
		if err := h(ctx, job("http", `{"url":"http://127.0.0.1:`+p+`/ok"}`, nil)); err != nil {
			t.Fatalf("127.0.0.1 with 127.0.0.0/8 allowed: %v", err)
		}
		<-srv.requests
		// Another class stays refused.
		if err := h(ctx, job("http", `{"url":"http://169.254.169.254/"}`, nil)); !worker.IsPermanent(err) {
			t.Errorf("169.254.169.254 with only 127.0.0.0/8 allowed: %v, want refused", err)
		}
	})

	t.Run("IPv6", func(t *testing.T) {
		got := make(chan struct{}, 1)
		s6 := listenHTTP(t, "tcp6", "[::1]:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			got <- struct{}{}
			w.WriteHeader(http.StatusNoContent)
		}))
		if err := httpHandler(t, "::1/128")(ctx, job("http", `{"url":"`+s6.URL+`/"}`, nil)); err != nil || len(got) != 1 {
			t.Errorf("[::1] with ::1/128 allowed: %v", err)
		}
	})

	t.Run("host name", func(t *testing.T) {
		h := httpHandler(t, "LocalHost.")
		if err := h(ctx, job("http", `{"url":"http://localhost:`+p+`/ok"}`, nil)); err != nil {
			t.Fatalf("localhost with localhost allowed: %v", err)
		}
		<-srv.requests
		// The name is allowed, not the addresses it resolves to.
		err := h(ctx, job("http", `{"url":"http://127.0.0.1:`+p+`/ok"}`, nil))
		if !worker.IsPermanent(err) || !strings.Contains(err.Error(), "destination 127.0.0.1 is a loopback address") {
			t.Errorf("127.0.0.1 with only localhost allowed: %v, want refused", err)
		}
		noRequest(t, srv)
	})
}

func TestHTTPJobRedirectToRefusedDestination(t *testing.T) {
	target := newHTTPServer(t) // on 127.0.0.1
	var frontHits atomic.Int32
	front := listenHTTP(t, "tcp4", "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		frontHits.Add(1)
		http.Redirect(w, r, target.URL+"/ok?token=s3cret", http.StatusFound)
	}))
	ctx := context.Background()

	err := httpHandler(t, "127.0.0.2/32")(ctx, job("http", `{"url":"`+front.URL+`/go"}`, nil))
	exact := "http GET " + front.URL + "/go (redirected to " + target.URL + "/ok): destination 127.0.0.1 is a loopback address, " +
		"which http jobs may not reach; allow it with --http-allow 127.0.0.1/32 (AGATE_HTTP_ALLOW)"
	if err == nil || err.Error() != exact || !worker.IsPermanent(err) {
		t.Errorf("redirect to 127.0.0.1: error %v\nwant permanent %s", err, exact)
	}
	if frontHits.Load() != 1 {
		t.Errorf("the allowed server received %d requests, want 1", frontHits.Load())
	}
	noRequest(t, target)

	// Control: with both allowed, the same redirect is followed.
	if err := httpHandler(t, "127.0.0.2/32,127.0.0.1")(ctx, job("http", `{"url":"`+front.URL+`/go"}`, nil)); err != nil {
		t.Fatalf("redirect with both allowed: %v", err)
	}
	if r := <-target.requests; r.path != "/ok" {
		t.Errorf("target saw %+v", r)
	}
}

func TestHTTPJobRedirectLimit(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "/again", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	err := httpHandler(t, "127.0.0.1")(context.Background(), job("http", `{"url":"`+srv.URL+`/"}`, nil))
	if err == nil || !strings.Contains(err.Error(), "stopped after 10 redirects") {
		t.Errorf("redirect loop: error %v, want it stopped after 10 redirects", err)
	}
	if n := hits.Load(); n != 11 {
		t.Errorf("redirect loop: %d requests, want 11 (the first and 10 redirects)", n)
	}
}

func TestParseHTTPAllowList(t *testing.T) {
	a, err := worker.ParseHTTPAllowList(" 10.0.0.0/8, 127.0.0.1 ,::1/128,, Metadata.Internal.,::ffff:169.254.0.0/112,127.1.2.3/8")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.String(), "10.0.0.0/8,127.0.0.1/32,::1/128,169.254.0.0/16,127.0.0.0/8,metadata.internal"; got != want {
		t.Errorf("parsed %q, want %q", got, want)
	}
	if err := a.Set("localhost"); err != nil || !strings.HasSuffix(a.String(), ",localhost") {
		t.Errorf("Set adds: %q, %v", a.String(), err)
	}
	for in, why := range map[string]string{
		"300.1.1.1/8":             "not a CIDR",
		"10.0.0.0/33":             "not a CIDR",
		"http://example.com":      "without scheme, port or path",
		"localhost:8080":          "without scheme, port or path",
		"*.example.com":           "wildcards",
		"300.1.1.1":               "looks like an IPv4 address",
		"exa mple.com":            "is not a letter",
		"fe80::1%eth0":            "zone",
		"a..b":                    "1 to 63 characters",
		"ok.example,bad name!":    "is not a letter",
		strings.Repeat("a", 64):   "1 to 63 characters",
		strings.Repeat("a.", 130): "1 to 253 characters",
	} {
		var b worker.HTTPAllowList
		err := b.Set(in)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: error %v, want one saying %q", in, err, why)
		}
		if len(b.Prefixes)+len(b.Hosts) != 0 {
			t.Errorf("%q: an invalid list added %s", in, b.String())
		}
	}
}
