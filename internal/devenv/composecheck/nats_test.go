package composecheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/events"
)

// natsConf is the configuration every NATS node of compose.yaml runs.
var natsConf = filepath.Join(repoRoot, "deploy", "nats", "nats.conf")

// natsEnv is what the configuration reads from the environment, with test values.
var natsEnv = map[string]string{
	"NATS_SERVER_NAME":        "nats-test",
	"NATS_SCHEDULER_PASSWORD": "s-pass",
	"NATS_WORKER_PASSWORD":    "w-pass",
	"NATS_PRODUCER_PASSWORD":  "p-pass",
}

// loadNATSConf parses the configuration with nats-server's own parser.
func loadNATSConf(t *testing.T, env map[string]string) *server.Options {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(natsConf)
	if err != nil {
		t.Fatalf("nats-server rejects %s: %v", natsConf, err)
	}
	return opts
}

func TestNATSConfig(t *testing.T) {
	opts := loadNATSConf(t, natsEnv)
	if !opts.JetStream {
		t.Error("JetStream is not enabled")
	}
	if opts.StoreDir == "" {
		t.Error("no JetStream store_dir: streams would go to a temporary directory")
	}
	if opts.ServerName != natsEnv["NATS_SERVER_NAME"] {
		t.Errorf("server_name = %q; want it from NATS_SERVER_NAME", opts.ServerName)
	}
	if opts.Cluster.Name == "" || opts.Cluster.Port == 0 {
		t.Errorf("no cluster: name %q, port %d", opts.Cluster.Name, opts.Cluster.Port)
	}
	var routes []string
	for _, r := range opts.Routes {
		routes = append(routes, r.Host)
	}
	for _, want := range []string{"nats-1", "nats-2", "nats-3"} {
		if !slices.Contains(routes, fmt.Sprintf("%s:%d", want, opts.Cluster.Port)) {
			t.Errorf("no route to %s:%d (routes %v)", want, opts.Cluster.Port, routes)
		}
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	for _, name := range []string{"scheduler", "worker", "producer"} {
		u := users[name]
		switch {
		case u == nil:
			t.Errorf("no NATS user %q", name)
		case u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Subscribe == nil:
			t.Errorf("user %q has no publish and subscribe permissions: it may use any subject", name)
		case u.Account == nil || u.Account.Name == server.DEFAULT_GLOBAL_ACCOUNT:
			t.Errorf("user %q is in the global account; want the JetStream-enabled AGATE account", name)
		}
	}
}

func TestNATSConfigNeedsItsPasswords(t *testing.T) {
	env := map[string]string{}
	for k, v := range natsEnv {
		env[k] = v
	}
	delete(env, "NATS_WORKER_PASSWORD")
	for k, v := range env {
		t.Setenv(k, v)
	}
	// t.Setenv then unset, so the variable is absent rather than empty, and restored afterwards.
	t.Setenv("NATS_WORKER_PASSWORD", "")
	if err := os.Unsetenv("NATS_WORKER_PASSWORD"); err != nil {
		t.Fatal(err)
	}
	if _, err := server.ProcessConfigFile(natsConf); err == nil {
		t.Error("the configuration loads without NATS_WORKER_PASSWORD; a user would get an empty password")
	}
}

// client is a connection as one of the configuration's users, recording the permission
// violations the server reports.
type client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func connect(t *testing.T, url, user, password string) *client {
	t.Helper()
	c := &client{errs: make(chan error, 64)}
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connecting as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// allowed fails the test when the server reported any violation so far.
func (c *client) allowed(t *testing.T, what string) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", what, err)
	}
	for {
		select {
		case err := <-c.errs:
			t.Errorf("%s: %v", what, err)
		default:
			return
		}
	}
}

// denied fails the test unless the server reports a permission violation on subject.
func (c *client) denied(t *testing.T, what, subject string) {
	t.Helper()
	_ = c.nc.Flush()
	deadline := time.After(2 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-deadline:
			t.Errorf("%s was allowed; want a permission violation on %s", what, subject)
			return
		}
	}
}

// TestNATSPermissions runs the configuration's accounts and users on an embedded server (one
// node: the cluster and monitoring settings are dropped) and walks through one job's messages as
// the three users, with the subjects, streams and durable names the code uses. A permission
// missing from nats.conf fails here instead of in a container; so does one granted too widely.
func TestNATSPermissions(t *testing.T) {
	opts := loadNATSConf(t, natsEnv)
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.Cluster = server.ClusterOpts{}
	opts.Routes = nil
	opts.StoreDir = t.TempDir()
	opts.JetStreamMaxStore = 64 << 20
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded NATS server did not start")
	}
	url := srv.ClientURL()

	const ns = "default"
	subj := events.Subjects(ns)
	sched := connect(t, url, "scheduler", natsEnv["NATS_SCHEDULER_PASSWORD"])
	work := connect(t, url, "worker", natsEnv["NATS_WORKER_PASSWORD"])
	prod := connect(t, url, "producer", natsEnv["NATS_PRODUCER_PASSWORD"])

	if _, err := nats.Connect(url, nats.UserInfo("scheduler", "wrong"), nats.NoReconnect()); err == nil {
		t.Error("a wrong password was accepted")
	}

	// Both kinds of process create the streams at start.
	for _, c := range []*client{sched, work} {
		if err := events.EnsureStreams(step(t), c.js, ns); err != nil {
			t.Fatalf("EnsureStreams: %v", err)
		}
	}
	sched.allowed(t, "scheduler creating the streams")
	work.allowed(t, "worker creating the streams")

	// Scheduler: its two durables, and the request-reply API.
	cmdCons, err := sched.js.CreateOrUpdateConsumer(step(t), events.StreamCommands(ns), jetstream.ConsumerConfig{
		Durable: command.DurableName, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("scheduler creating %s: %v", command.DurableName, err)
	}
	doneCons, err := sched.js.CreateOrUpdateConsumer(step(t), events.StreamDone(ns), jetstream.ConsumerConfig{
		Durable: complete.DurableName, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("scheduler creating %s: %v", complete.DurableName, err)
	}
	api, err := sched.nc.QueueSubscribe(subj.API("*"), "agate-scheduler", func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"ok":true}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = api.Unsubscribe() }()
	sched.allowed(t, "scheduler consumers and API subscription")

	// Producer: a command by request and one through the COMMANDS stream.
	reply, err := prod.nc.RequestWithContext(step(t), subj.API("schedule_job"), []byte(`{"id":"1"}`))
	if err != nil || string(reply.Data) != `{"ok":true}` {
		t.Errorf("producer request to %s: %v, %v", subj.API("schedule_job"), reply, err)
	}
	if _, err := prod.js.Publish(step(t), subj.Command("schedule_job"), []byte(`{"id":"2"}`)); err != nil {
		t.Errorf("producer publishing a command: %v", err)
	}
	evtSub, err := prod.nc.SubscribeSync(subj.All("evt"))
	if err != nil {
		t.Fatal(err)
	}
	prod.allowed(t, "producer sending commands and watching events")
	fetchAck(t, cmdCons, "scheduler reading the command")
	sched.allowed(t, "scheduler reading the command")

	// Scheduler fires; worker runs and answers.
	if _, err := sched.js.Publish(step(t), subj.Evt("trigger"), []byte(`{}`)); err != nil {
		t.Errorf("scheduler publishing an event: %v", err)
	}
	if _, err := evtSub.NextMsg(5 * time.Second); err != nil {
		t.Errorf("producer watching events: %v", err)
	}
	pa, err := sched.js.Publish(step(t), subj.Fired("noop"), []byte(`{}`))
	if err != nil {
		t.Fatalf("scheduler publishing JobFired: %v", err)
	}
	sched.allowed(t, "scheduler publishing events")

	advisory := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + events.StreamFired(ns) + ".*"
	if _, err := work.nc.QueueSubscribe(advisory, "agate-worker-dead-letters", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	firedCons, err := work.js.CreateOrUpdateConsumer(step(t), events.StreamFired(ns), jetstream.ConsumerConfig{
		Durable: workerDurable, FilterSubject: subj.Fired("noop"),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5})
	if err != nil {
		t.Fatalf("worker creating %s: %v", workerDurable, err)
	}
	fetchAck(t, firedCons, "worker reading JobFired")
	if stream, err := work.js.Stream(step(t), events.StreamFired(ns)); err != nil {
		t.Errorf("worker opening %s: %v", events.StreamFired(ns), err)
	} else if _, err := stream.GetMsg(step(t), pa.Sequence); err != nil {
		t.Errorf("worker reading a dead-lettered JobFired back: %v", err)
	}
	if _, err := work.js.Publish(step(t), subj.Done("noop"), []byte(`{}`)); err != nil {
		t.Errorf("worker publishing JobCompleted: %v", err)
	}
	work.allowed(t, "worker running a job")
	fetchAck(t, doneCons, "scheduler reading the completion")
	sched.allowed(t, "scheduler reading the completion")

	// Nobody may speak for another role, or for another namespace.
	_ = prod.nc.Publish(subj.Fired("noop"), []byte(`{}`))
	prod.denied(t, "producer publishing JobFired", subj.Fired("noop"))
	_, _ = prod.nc.SubscribeSync(subj.All("fired"))
	prod.denied(t, "producer subscribing to JobFired", subj.All("fired"))
	_ = prod.nc.Publish("agate.other.cmd.pause_all", []byte(`{}`))
	prod.denied(t, "producer commanding another namespace", "agate.other.cmd.pause_all")
	_ = prod.nc.Publish("$JS.API.STREAM.DELETE."+events.StreamCommands(ns), nil)
	prod.denied(t, "producer deleting a stream", "$JS.API.STREAM.DELETE.")
	_ = work.nc.Publish(subj.Evt("trigger"), []byte(`{}`))
	work.denied(t, "worker publishing a scheduler event", subj.Evt("trigger"))
	_ = work.nc.Publish(subj.Fired("noop"), []byte(`{}`))
	work.denied(t, "worker publishing JobFired", subj.Fired("noop"))
	_ = work.nc.Publish("$JS.API.STREAM.PURGE."+events.StreamFired(ns), nil)
	work.denied(t, "worker purging a stream", "$JS.API.STREAM.PURGE.")
	_ = sched.nc.Publish(subj.Done("noop"), []byte(`{}`))
	sched.denied(t, "scheduler publishing a completion", subj.Done("noop"))
	_ = sched.nc.Publish("$JS.API.STREAM.DELETE."+events.StreamEvents(ns), nil)
	sched.denied(t, "scheduler deleting a stream", "$JS.API.STREAM.DELETE.")
	_ = sched.nc.Publish("$JS.API.CONSUMER.DELETE."+events.StreamFired(ns)+"."+workerDurable, nil)
	sched.denied(t, "scheduler deleting a worker's consumer", "$JS.API.CONSUMER.DELETE.")
	_ = work.nc.Publish("$JS.API.CONSUMER.DELETE."+events.StreamDone(ns)+"."+complete.DurableName, nil)
	work.denied(t, "worker deleting the scheduler's consumer", "$JS.API.CONSUMER.DELETE.")
	_ = work.nc.Publish("$JS.API.CONSUMER.MSG.NEXT."+events.StreamCommands(ns)+"."+command.DurableName, nil)
	work.denied(t, "worker reading commands", "$JS.API.CONSUMER.MSG.NEXT.")
}

// step is the deadline of one operation against the embedded server: a denied request is never
// answered, and a short deadline lets the test go on to report every other problem.
func step(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// workerDurable is a worker's durable consumer for the noop job type (worker.ConsumerName). The
// worker's permissions allow any durable name on the FIRED stream, so the exact name does not
// matter here; the scheduler's durables do and come from their packages.
const workerDurable = "worker-noop"

// fetchAck fetches one message and acknowledges it, waiting for the server to confirm the ack.
func fetchAck(t *testing.T, cons jetstream.Consumer, what string) {
	t.Helper()
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(3*time.Second))
	if err != nil {
		t.Errorf("%s: fetch: %v", what, err)
		return
	}
	n := 0
	for m := range batch.Messages() {
		n++
		if err := m.DoubleAck(step(t)); err != nil {
			t.Errorf("%s: ack: %v", what, err)
		}
	}
	if err := batch.Error(); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	if n != 1 {
		t.Errorf("%s: fetched %d messages; want 1", what, n)
	}
}
