package devcluster

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// A taken --http port is replaced by a free one of the same host, as the NATS port is; none is
// served when none is asked for.
func TestServeHTTPTakesAFreePortWhenTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	log := slog.New(slog.DiscardHandler)
	srv, err := serveHTTP(t.Context(), Config{HTTP: l.Addr().String()}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	if srv.Addr() == l.Addr().String() || !strings.HasPrefix(srv.Addr(), "127.0.0.1:") {
		t.Errorf("listening on %s, with %s taken", srv.Addr(), l.Addr())
	}
	if srv, err := serveHTTP(t.Context(), Config{}, log); srv != nil || err != nil {
		t.Errorf("no --http: %v, %v", srv, err)
	}
}
