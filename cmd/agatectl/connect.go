package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/natsconn"
)

// unavailableError marks a cluster that could not be reached or answered "unavailable": exit 3.
type unavailableError struct{ err error }

func (e unavailableError) Error() string { return e.err.Error() }
func (e unavailableError) Unwrap() error { return e.err }

// clusterOpts are the flags of every command that talks to a cluster.
type clusterOpts struct {
	natsURL, creds, ca, namespace string
	timeout                       time.Duration
	output                        string
}

func (o *clusterOpts) bind(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&o.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	cli.BindEnv(f, "nats-url", "NATS_URL")
	f.StringVar(&o.creds, "nats-creds", "", "NATS credentials file (JWT and NKey seed)")
	cli.BindEnv(f, "nats-creds", "NATS_CREDS")
	f.StringVar(&o.ca, "nats-ca", "", "PEM file of the CA that signed the NATS server's TLS certificate")
	cli.BindEnv(f, "nats-ca", "NATS_CA")
	f.StringVar(&o.namespace, "namespace", "default", "scheduler namespace")
	cli.BindEnv(f, "namespace", "AGATE_NAMESPACE")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the cluster, retries included")
	f.StringVarP(&o.output, "output", "o", "table", "output: table (for people) or json (for scripts)")
}

// connect opens a NATS connection, failing fast when no server answers, and returns a client,
// a context bounded by --timeout, and what closes both.
func (o *clusterOpts) connect(ctx context.Context) (*client.Client, context.Context, func(), error) {
	if o.output != "table" && o.output != "json" {
		return nil, nil, nil, usagef("--output %q: use table or json", o.output)
	}
	nc, err := nats.Connect(o.natsURL, append(natsconn.Auth(natsconn.Config{Creds: o.creds, CA: o.ca}),
		nats.Name("agatectl"), nats.Timeout(5*time.Second))...)
	if err != nil {
		return nil, nil, nil, unavailableError{fmt.Errorf("cannot reach NATS at %s (set --nats-url or NATS_URL): %w", natsconn.Redact(o.natsURL), err)}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	c := client.New(nc, client.Options{Namespace: o.namespace, RetryFor: o.timeout})
	return c, ctx, func() { cancel(); nc.Close() }, nil
}

// exitCode maps an error to agatectl's documented exit status.
func exitCode(err error) int {
	var ue usageError
	var un unavailableError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue) || isFlagError(err):
		return 2
	case errors.As(err, &un) || errors.Is(err, client.ErrUnavailable) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded):
		return 3
	}
	return 1
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
