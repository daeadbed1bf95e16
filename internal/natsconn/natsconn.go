// Package natsconn opens the NATS connections of Agate's processes the same way everywhere:
// reconnect forever, log disconnects, credentials and TLS roots from configuration, and never a
// password in a log line or an error.
package natsconn

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"
)

// Config says how to reach NATS.
type Config struct {
	URL    string // one or more server URLs, comma-separated
	Name   string // connection name shown by the server's monitoring
	Creds  string // credentials file (JWT and NKey seed); "" for none
	CA     string // PEM file of the CA of the servers' TLS certificates; "" for the system roots
	Logger *slog.Logger
}

// Connect connects, and keeps reconnecting for the life of the connection.
func Connect(cfg Config) (*nats.Conn, error) {
	log := cmp.Or(cfg.Logger, slog.Default())
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS; reconnecting", slog.Any("error", err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("reconnected to NATS", slog.String("server", Redact(nc.ConnectedUrl())))
		}),
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	if cfg.CA != "" {
		opts = append(opts, nats.RootCAs(cfg.CA))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s (set --nats-url or NATS_URL): %w", Redact(cfg.URL), err)
	}
	return nc, nil
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
