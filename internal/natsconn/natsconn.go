// Package natsconn opens the NATS connections of Agate's processes the same way everywhere:
// reconnect forever, log disconnects, credentials and TLS roots from configuration, and never a
// password in a log line or an error.
package natsconn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NotAnswering reports an error of a request NATS or JetStream did not answer: a server
// restarting or out of reach, JetStream not up yet. Worth waiting out, unlike a refusal.
func NotAnswering(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionReconnecting)
}

// Config says how to reach NATS.
type Config struct {
	URL    string // one or more server URLs, comma-separated
	Name   string // connection name shown by the server's monitoring
	Creds  string // credentials file (JWT and NKey seed); "" for none
	CA     string // PEM file of the CA of the servers' TLS certificates; "" for the system roots
	Logger *slog.Logger
}

// Connect connects, and keeps reconnecting for the life of the connection. When no server
// answers yet it says so once in the log and waits until one does (or ctx ends), so processes
// may start before NATS.
func Connect(ctx context.Context, cfg Config) (*nats.Conn, error) {
	log := cmp.Or(cfg.Logger, slog.Default())
	connected := make(chan struct{})
	var once sync.Once
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(*nats.Conn) { once.Do(func() { close(connected) }) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS; reconnecting", slog.Any("error", err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("reconnected to NATS", slog.String("server", Redact(nc.ConnectedUrl())))
		}),
	}
	nc, err := nats.Connect(cfg.URL, append(opts, Auth(cfg)...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s (set --nats-url or NATS_URL): %w", Redact(cfg.URL), err)
	}
	if nc.IsConnected() {
		return nc, nil
	}
	log.Warn("NATS is not answering yet; waiting for it", slog.String("url", Redact(cfg.URL)))
	select {
	case <-connected:
		log.Info("connected to NATS", slog.String("server", Redact(nc.ConnectedUrl())))
		return nc, nil
	case <-ctx.Done():
		nc.Close()
		return nil, fmt.Errorf("waiting for NATS at %s: %w", Redact(cfg.URL), ctx.Err())
	}
}

// Auth is the credentials and TLS options of cfg, for a connection made without Connect (a
// command-line tool that must fail fast rather than wait).
func Auth(cfg Config) []nats.Option {
	var opts []nats.Option
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	if cfg.CA != "" {
		opts = append(opts, nats.RootCAs(cfg.CA))
	}
	return opts
}

// Redact removes passwords and tokens from NATS URLs before they are logged.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = url.User("redacted")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
