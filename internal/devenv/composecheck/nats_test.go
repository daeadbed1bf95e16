package composecheck

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	agateclient "github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/api"
	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/natsperm"
	"github.com/agatesched/agate/internal/worker"
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

// TestNATSConfigIsGenerated keeps deploy/nats/nats.conf's accounts, users and permissions
// exactly what `scheduler nats-config --namespace default` prints: the file's hand-written
// server settings come first, the generated block last, and only the block configures users.
func TestNATSConfigIsGenerated(t *testing.T) {
	raw, err := os.ReadFile(natsConf)
	if err != nil {
		t.Fatal(err)
	}
	want, err := natsperm.Config(natsperm.Namespace{Name: "default"})
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	i := strings.Index(text, generatedMarker)
	if i < 0 {
		t.Fatalf("%s has no generated block (a line starting %q); append the output of `scheduler nats-config --namespace default`",
			natsConf, generatedMarker)
	}
	server := text[:i]
	if *update {
		if err := os.WriteFile(natsConf, []byte(server+want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got := text[i:]; got != want {
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		n := 0
		for n < len(gl) && n < len(wl) && gl[n] == wl[n] {
			n++
		}
		var g, w string
		if n < len(gl) {
			g = gl[n]
		}
		if n < len(wl) {
			w = wl[n]
		}
		t.Errorf("%s drifted from `scheduler nats-config --namespace default` at line %d of its block:\n got: %s\nwant: %s\n"+
			"run: go test ./internal/devenv/composecheck -run TestNATSConfigIsGenerated -update", natsConf, n+1, g, w)
	}
	for _, key := range []string{"accounts", "authorization", "users", "permissions", "no_auth_user", "system_account"} {
		if regexp.MustCompile(`(?m)^\s*` + key + `\s*[:={]`).MatchString(server) {
			t.Errorf("%s sets %s outside the generated block", natsConf, key)
		}
	}
}

// generatedMarker starts the block natsperm.Config writes.
const generatedMarker = "# Generated by `scheduler nats-config"

var update = flag.Bool("update", false, "rewrite the generated block of deploy/nats/nats.conf")

// startServer runs opts on an embedded server (one node: cluster and monitoring settings are
// dropped) and returns its client URL.
func startServer(t *testing.T, opts *server.Options) string {
	t.Helper()
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
	return srv.ClientURL()
}

// generatedServer runs an embedded server whose users are natsperm.Config(nss...), with a
// password per user set in the environment; passwords maps each user to it.
func generatedServer(t *testing.T, nss ...natsperm.Namespace) (url string, passwords map[string]string) {
	t.Helper()
	block, err := natsperm.Config(nss...)
	if err != nil {
		t.Fatal(err)
	}
	passwords = map[string]string{}
	for _, n := range nss {
		for _, r := range natsperm.Roles {
			passwords[n.User(r)] = n.User(r) + "-pass"
			t.Setenv(n.PasswordVar(r), passwords[n.User(r)])
		}
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte("port: -1\njetstream {}\n\n"+block), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server rejects the generated configuration: %v\n%s", err, block)
	}
	return startServer(t, opts), passwords
}

// roleClients are connections as the three users of one namespace.
type roleClients struct {
	ns                    string
	sched, work, producer *client
}

func connectRoles(t *testing.T, url string, n natsperm.Namespace, passwords map[string]string) roleClients {
	t.Helper()
	user := func(r natsperm.Role) *client { return connect(t, url, n.User(r), passwords[n.User(r)]) }
	return roleClients{ns: n.Name, sched: user(natsperm.Scheduler), work: user(natsperm.Worker), producer: user(natsperm.Producer)}
}

// TestNATSPermissions runs nats.conf's accounts and users on an embedded server and walks through
// one job's messages as the three users of namespace "default", with the subjects, streams and
// durable names the code uses. A permission missing from nats.conf fails here instead of in a
// container; so does one granted too widely.
func TestNATSPermissions(t *testing.T) {
	url := startServer(t, loadNATSConf(t, natsEnv))
	if _, err := nats.Connect(url, nats.UserInfo("scheduler", "wrong"), nats.NoReconnect()); err == nil {
		t.Error("a wrong password was accepted")
	}
	passwords := map[string]string{
		"scheduler": natsEnv["NATS_SCHEDULER_PASSWORD"],
		"worker":    natsEnv["NATS_WORKER_PASSWORD"],
		"producer":  natsEnv["NATS_PRODUCER_PASSWORD"],
	}
	walkThrough(t, connectRoles(t, url, natsperm.Namespace{Name: "default"}, passwords))
}

// TestNATSPermissionsSecondNamespace generates the users of two namespaces on one server, as an
// operator running both would, walks through each, and checks that no user reaches into the
// other namespace.
func TestNATSPermissionsSecondNamespace(t *testing.T) {
	def, billing := natsperm.Namespace{Name: "default"}, natsperm.Namespace{Name: "billing", UserPrefix: "billing-"}
	url, passwords := generatedServer(t, def, billing)
	d := connectRoles(t, url, def, passwords)
	b := connectRoles(t, url, billing, passwords)
	t.Run(b.ns, func(t *testing.T) { walkThrough(t, b) })
	t.Run(d.ns, func(t *testing.T) { walkThrough(t, d) })

	for _, c := range []struct {
		from, to roleClients
	}{{b, d}, {d, b}} {
		other := events.Subjects(c.to.ns)
		who := c.from.ns + "'s "
		_ = c.from.producer.nc.Publish(other.Command("pause_all"), []byte(`{}`))
		c.from.producer.denied(t, who+"producer commanding namespace "+c.to.ns, other.Command("pause_all"))
		_, _ = c.from.producer.nc.SubscribeSync(other.All("evt"))
		c.from.producer.denied(t, who+"producer watching namespace "+c.to.ns, other.All("evt"))
		readOther := "$JS.API.CONSUMER.CREATE." + events.StreamEvents(c.to.ns) + ".x." + other.All("evt")
		_ = c.from.producer.nc.Publish(readOther, []byte(`{}`))
		c.from.producer.denied(t, who+"producer reading the events of namespace "+c.to.ns, readOther)
		_ = c.from.producer.nc.Publish(other.API("schedule_job"), []byte(`{}`))
		c.from.producer.denied(t, who+"producer requesting namespace "+c.to.ns, other.API("schedule_job"))
		_ = c.from.work.nc.Publish(other.Done("noop"), []byte(`{}`))
		c.from.work.denied(t, who+"worker completing a job of namespace "+c.to.ns, other.Done("noop"))
		next := "$JS.API.CONSUMER.MSG.NEXT." + events.StreamFired(c.to.ns) + "." + workerDurable
		_ = c.from.work.nc.Publish(next, nil)
		c.from.work.denied(t, who+"worker pulling jobs of namespace "+c.to.ns, next)
		_, _ = c.from.work.nc.SubscribeSync(natsperm.MaxDeliveriesAdvisory(c.to.ns))
		c.from.work.denied(t, who+"worker watching advisories of namespace "+c.to.ns, natsperm.MaxDeliveriesAdvisory(c.to.ns))
		_ = c.from.sched.nc.Publish(other.Fired("noop"), []byte(`{}`))
		c.from.sched.denied(t, who+"scheduler firing in namespace "+c.to.ns, other.Fired("noop"))
		_, _ = c.from.sched.nc.SubscribeSync(other.API("*"))
		c.from.sched.denied(t, who+"scheduler answering namespace "+c.to.ns, other.API("*"))
		otherInfo := "$SRV.INFO." + events.ServiceName(c.to.ns)
		_ = c.from.producer.nc.Publish(otherInfo, nil)
		c.from.producer.denied(t, who+"producer discovering namespace "+c.to.ns, otherInfo)
		_, _ = c.from.sched.nc.SubscribeSync(otherInfo)
		c.from.sched.denied(t, who+"scheduler answering discovery for namespace "+c.to.ns, otherInfo)
		create := "$JS.API.STREAM.UPDATE." + events.StreamFired(c.to.ns)
		_ = c.from.sched.nc.Publish(create, nil)
		c.from.sched.denied(t, who+"scheduler updating a stream of namespace "+c.to.ns, create)
	}
}

// TestWorkerRunsWithItsPermissions runs the real worker as the generated worker user: started
// before any scheduler, it waits for the streams without trying to create them, then runs a job,
// and the server reports no permission violation on its connection.
func TestWorkerRunsWithItsPermissions(t *testing.T) {
	n := natsperm.Namespace{Name: "jobs"}
	url, passwords := generatedServer(t, n)
	r := connectRoles(t, url, n, passwords)
	subj := events.Subjects(n.Name)

	logs := &syncBuffer{}
	reg := worker.NewRegistry()
	reg.Register("noop", func(context.Context, worker.Job) error { return nil })
	w, err := worker.New(worker.Config{Namespace: n.Name, InstanceID: "w1",
		Logger: slog.New(slog.NewTextHandler(logs, nil))}, r.work.js, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	waitLog(t, logs, "waiting for a scheduler to create the streams of namespace jobs")

	if err := events.EnsureStreams(step(t), r.sched.js, n.Name); err != nil {
		t.Fatal(err)
	}
	doneCons, err := r.sched.js.CreateOrUpdateConsumer(step(t), events.StreamDone(n.Name), jetstream.ConsumerConfig{
		Durable: complete.DurableName, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "worker started")
	fired := events.JobFired{FireID: uuid.Must(uuid.NewV7()), Job: events.JobRef{Group: "g", Name: "j", Type: "noop"},
		Trigger: events.Key{Group: "g", Name: "t"}, ScheduledTime: time.Now().UTC(), FiredTime: time.Now().UTC()}
	ev, err := events.New(events.TypeJobFired, events.Source(n.Name, "s1"), events.AggregateJob, "g.j", subj.Fired("noop"), time.Now(), fired)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := events.Message(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.sched.js.PublishMsg(step(t), msg); err != nil {
		t.Fatal(err)
	}
	batch, err := doneCons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		var res events.JobResult
		if env, err := events.Decode(m.Data(), &res); err != nil || env.Type != events.TypeJobCompleted || res.FireID != fired.FireID {
			t.Errorf("outcome %s of fire %s (%v); want %s of %s", env.Type, res.FireID, err, events.TypeJobCompleted, fired.FireID)
		}
		_ = m.Ack()
	}
	if batch.Error() != nil {
		t.Errorf("no outcome: %v", batch.Error())
	}
	r.work.allowed(t, "worker running a job")
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the worker logged errors:\n%s", logs)
	}
}

// syncBuffer is a log destination tests read while the worker writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitLog(t *testing.T, logs *syncBuffer, line string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never logged %q; it logged:\n%s", line, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// walkThrough follows one job's messages as the three users of r.ns, then checks that none of
// them may speak for another role.
func walkThrough(t *testing.T, r roleClients) {
	t.Helper()
	ns := r.ns
	subj := events.Subjects(ns)
	sched, work, prod := r.sched, r.work, r.producer

	// Workers only look the streams up; schedulers create them.
	if _, err := work.js.Stream(step(t), events.StreamFired(ns)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("worker looking up %s before any scheduler started: %v; want stream not found", events.StreamFired(ns), err)
	}
	work.allowed(t, "worker looking a stream up")
	if err := events.EnsureStreams(step(t), work.js, ns); err == nil {
		t.Error("a worker created the streams")
	}
	work.denied(t, "worker creating the streams", "$JS.API.STREAM.")
	_ = work.nc.Publish("$JS.API.STREAM.CREATE."+events.StreamFired(ns), []byte(`{}`))
	work.denied(t, "worker creating a stream", "$JS.API.STREAM.CREATE.")
	if err := events.EnsureStreams(step(t), sched.js, ns); err != nil {
		t.Fatalf("scheduler creating the streams: %v", err)
	}
	sched.allowed(t, "scheduler creating the streams")
	for _, st := range []string{events.StreamFired(ns), events.StreamDone(ns)} {
		if _, err := work.js.Stream(step(t), st); err != nil {
			t.Errorf("worker looking up %s: %v", st, err)
		}
	}
	work.allowed(t, "worker looking the streams up")

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
	// The scheduler's NATS service, as nodes run it, with one endpoint.
	svcCtx, stopService := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- api.Serve(svcCtx, sched.nc, api.Config{Namespace: ns, InstanceID: "s1", Endpoints: []api.Endpoint{{
			Name: "schedule_job", Kind: "command",
			Handle: func(context.Context, []byte) (any, *apierr.Error) { return map[string]bool{"ok": true}, nil },
		}}})
	}()
	defer func() {
		stopService()
		if err := <-served; err != nil {
			t.Errorf("api service: %v", err)
		}
	}()
	sched.allowed(t, "scheduler consumers")

	// Producer: a command by request (once the service answers) and one through the COMMANDS stream.
	var reply *nats.Msg
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		reply, err = prod.nc.RequestWithContext(step(t), subj.API("schedule_job"), []byte(`{"id":"1"}`))
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || string(reply.Data) != `{"ok":true}` {
		t.Errorf("producer request to %s: %v, %v", subj.API("schedule_job"), reply, err)
	}
	// The producer discovers its namespace's service; the scheduler answers.
	svc := events.ServiceName(ns)
	for _, verb := range natsperm.ServiceVerbs {
		m, err := prod.nc.RequestWithContext(step(t), "$SRV."+verb+"."+svc, nil)
		if err != nil {
			t.Errorf("producer requesting $SRV.%s.%s: %v", verb, svc, err)
			continue
		}
		var id struct{ ID string }
		if err := json.Unmarshal(m.Data, &id); err != nil || id.ID == "" {
			t.Errorf("$SRV.%s.%s answered %s", verb, svc, m.Data)
		} else if _, err := prod.nc.RequestWithContext(step(t), "$SRV."+verb+"."+svc+"."+id.ID, nil); err != nil {
			t.Errorf("producer requesting $SRV.%s.%s.%s: %v", verb, svc, id.ID, err)
		}
	}
	sched.allowed(t, "scheduler serving the api and $SRV requests")
	if _, err := prod.js.Publish(step(t), subj.Command("schedule_job"), []byte(`{"id":"2"}`)); err != nil {
		t.Errorf("producer publishing a command: %v", err)
	}
	evtSub, err := prod.nc.SubscribeSync(subj.All("evt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = evtSub.Unsubscribe() }()
	prod.allowed(t, "producer sending commands, discovering the service and watching events")
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

	adv, err := work.nc.QueueSubscribe(natsperm.MaxDeliveriesAdvisory(ns), "agate-worker-dead-letters", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = adv.Unsubscribe() }()
	firedCons, err := work.js.CreateOrUpdateConsumer(step(t), events.StreamFired(ns), jetstream.ConsumerConfig{
		Durable: workerDurable, FilterSubject: subj.Fired("noop"),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5})
	if err != nil {
		t.Fatalf("worker creating %s: %v", workerDurable, err)
	}
	if _, err := work.js.Consumer(step(t), events.StreamFired(ns), workerDurable); err != nil {
		t.Errorf("worker looking up %s: %v", workerDurable, err)
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

	// Producer: reads the three streams of events through consumers of its own (agatectl
	// events). The test's messages are no CloudEvents, so each comes as a malformed event.
	reader := agateclient.New(prod.nc, agateclient.Options{Namespace: ns})
	if evs, err := reader.Events(step(t), agateclient.EventsOptions{}); err != nil {
		t.Errorf("producer reading the events: %v", err)
	} else {
		read := 0
		for _, err := range evs.All() {
			if !errors.Is(err, agateclient.ErrMalformedEvent) {
				t.Errorf("producer reading the events: %v", err)
				break
			}
			read++
		}
		evs.Close()
		if read != 3 {
			t.Errorf("producer read %d messages of EVENTS, FIRED and DONE; want the 3 published", read)
		}
	}
	prod.allowed(t, "producer reading the streams of events")
	// A worker may not: the read fails, saying so.
	workerReader := agateclient.New(work.nc, agateclient.Options{Namespace: ns, RequestTimeout: 500 * time.Millisecond})
	if _, err := workerReader.Events(step(t), agateclient.EventsOptions{}); err == nil || !strings.Contains(err.Error(), "permissions violation") {
		t.Errorf("worker reading the events: %v; want a permissions violation", err)
	}
	work.denied(t, "worker reading the events", "$JS.API.CONSUMER.CREATE."+events.StreamEvents(ns))

	// Nobody may speak for another role.
	_ = prod.nc.Publish(subj.Fired("noop"), []byte(`{}`))
	prod.denied(t, "producer publishing JobFired", subj.Fired("noop"))
	_ = prod.nc.Publish(subj.Done("noop"), []byte(`{}`))
	prod.denied(t, "producer publishing a completion", subj.Done("noop"))
	_, _ = prod.nc.SubscribeSync(subj.All("fired"))
	prod.denied(t, "producer subscribing to JobFired", subj.All("fired"))
	_ = prod.nc.Publish("agate.other.cmd.pause_all", []byte(`{}`))
	prod.denied(t, "producer commanding another namespace", "agate.other.cmd.pause_all")
	_ = prod.nc.Publish("$JS.API.STREAM.DELETE."+events.StreamCommands(ns), nil)
	prod.denied(t, "producer deleting a stream", "$JS.API.STREAM.DELETE.")
	_ = prod.nc.Publish("$SRV.INFO", nil)
	prod.denied(t, "producer asking every service of the account", "$SRV.INFO")
	takeDone := "$JS.API.CONSUMER.MSG.NEXT." + events.StreamDone(ns) + "." + complete.DurableName
	_ = prod.nc.Publish(takeDone, nil)
	prod.denied(t, "producer taking a completion from the scheduler", takeDone)
	changeDone := "$JS.API.CONSUMER.CREATE." + events.StreamDone(ns) + "." + complete.DurableName + "." + subj.All("done")
	_ = prod.nc.Publish(changeDone, []byte(`{}`))
	prod.denied(t, "producer changing the scheduler's consumer", changeDone)
	readCmds := "$JS.API.CONSUMER.CREATE." + events.StreamCommands(ns) + ".x." + subj.All("cmd")
	_ = prod.nc.Publish(readCmds, []byte(`{}`))
	prod.denied(t, "producer reading the commands stream", readCmds)
	_ = prod.nc.Publish("$JS.API.CONSUMER.DELETE."+events.StreamFired(ns)+"."+workerDurable, nil)
	prod.denied(t, "producer deleting a worker's consumer", "$JS.API.CONSUMER.DELETE.")
	_ = work.nc.Publish("$SRV.STATS."+events.ServiceName(ns), nil)
	work.denied(t, "worker asking the scheduler's statistics", "$SRV.STATS.")
	_ = work.nc.Publish(subj.Evt("trigger"), []byte(`{}`))
	work.denied(t, "worker publishing a scheduler event", subj.Evt("trigger"))
	_ = work.nc.Publish(subj.Fired("noop"), []byte(`{}`))
	work.denied(t, "worker publishing JobFired", subj.Fired("noop"))
	// A worker hears interrupt requests, not the job events (JobAdded carries every job's data).
	_, _ = work.nc.SubscribeSync(subj.Evt("job"))
	work.denied(t, "worker watching the job events", subj.Evt("job"))
	_ = work.nc.Publish(subj.Command("pause_all"), []byte(`{}`))
	work.denied(t, "worker publishing a command", subj.Command("pause_all"))
	_ = work.nc.Publish("$JS.API.STREAM.DELETE."+events.StreamFired(ns), nil)
	work.denied(t, "worker deleting a stream", "$JS.API.STREAM.DELETE.")
	_ = work.nc.Publish("$JS.API.STREAM.UPDATE."+events.StreamFired(ns), []byte(`{}`))
	work.denied(t, "worker updating a stream", "$JS.API.STREAM.UPDATE.")
	_ = work.nc.Publish("$JS.API.STREAM.PURGE."+events.StreamFired(ns), nil)
	work.denied(t, "worker purging a stream", "$JS.API.STREAM.PURGE.")
	unfiltered := "$JS.API.CONSUMER.CREATE." + events.StreamFired(ns) + "." + workerDurable
	_ = work.nc.Publish(unfiltered, []byte(`{}`))
	work.denied(t, "worker creating a consumer of every job type", unfiltered)
	onDone := "$JS.API.CONSUMER.CREATE." + events.StreamDone(ns) + ".x." + subj.Done("noop")
	_ = work.nc.Publish(onDone, []byte(`{}`))
	work.denied(t, "worker creating a consumer on DONE", onDone)
	_ = work.nc.Publish("$JS.API.CONSUMER.DELETE."+events.StreamDone(ns)+"."+complete.DurableName, nil)
	work.denied(t, "worker deleting the scheduler's consumer", "$JS.API.CONSUMER.DELETE.")
	_ = work.nc.Publish("$JS.API.CONSUMER.MSG.NEXT."+events.StreamCommands(ns)+"."+command.DurableName, nil)
	work.denied(t, "worker reading commands", "$JS.API.CONSUMER.MSG.NEXT.")
	// A scheduler publishes the final JobFailed of an execution it abandons, and reads the
	// workers' consumer state for it, but takes no fire meant for a worker.
	_ = sched.nc.Publish(subj.Done("noop"), []byte(`{}`))
	sched.allowed(t, "scheduler abandoning an execution")
	if _, err := sched.nc.Request("$JS.API.CONSUMER.INFO."+events.StreamFired(ns)+"."+workerDurable, nil, 5*time.Second); err != nil {
		t.Errorf("scheduler reading a worker consumer's state: %v", err)
	}
	sched.allowed(t, "scheduler reading a worker consumer's state")
	_ = sched.nc.Publish("$JS.API.CONSUMER.MSG.NEXT."+events.StreamFired(ns)+"."+workerDurable, nil)
	sched.denied(t, "scheduler taking a worker's fire", "$JS.API.CONSUMER.MSG.NEXT.")
	_ = sched.nc.Publish("$JS.API.STREAM.DELETE."+events.StreamEvents(ns), nil)
	sched.denied(t, "scheduler deleting a stream", "$JS.API.STREAM.DELETE.")
	_ = sched.nc.Publish("$JS.API.CONSUMER.DELETE."+events.StreamFired(ns)+"."+workerDurable, nil)
	sched.denied(t, "scheduler deleting a worker's consumer", "$JS.API.CONSUMER.DELETE.")
	for _, st := range []string{events.StreamFired(ns), events.StreamDone(ns)} {
		if _, err := sched.js.Stream(step(t), st); err != nil {
			t.Errorf("stream %s after the denied deletes: %v", st, err)
		}
	}
}

// step is the deadline of one operation against the embedded server: a denied request is never
// answered, and a short deadline lets the test go on to report every other problem.
func step(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// workerDurable is a worker's durable consumer for the noop job type.
var workerDurable = events.WorkerDurable("noop")

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
