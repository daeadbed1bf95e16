package testenv

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// HTTPGet requests url and returns the status and the body: for tests of a process's HTTP
// listener.
func HTTPGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// AwaitHTTP asks url until it answers status code, or timeout passes: for another process's
// readiness, which only its HTTP answer tells. It returns the last status and body.
func AwaitHTTP(t testing.TB, url string, code int, timeout time.Duration) (int, string) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		got, body := HTTPGet(t, url)
		if got == code {
			return got, body
		}
		select {
		case <-deadline:
			return got, body
		case <-tick.C:
		}
	}
}
