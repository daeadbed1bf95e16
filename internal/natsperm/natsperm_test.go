package natsperm_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/natsperm"
)

// The durables the permissions name are those the code creates.
func TestDurableNamesMatchTheCode(t *testing.T) {
	p, err := natsperm.For("ns", natsperm.Scheduler)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"$JS.API.CONSUMER.MSG.NEXT.AGATE_ns_COMMANDS." + command.DurableName,
		"$JS.API.CONSUMER.MSG.NEXT.AGATE_ns_DONE." + complete.DurableName,
	} {
		if !slices.Contains(p.Publish, want) {
			t.Errorf("scheduler may not publish to %s", want)
		}
	}
	// Producers read DONE through consumers of their own, never through the scheduler's.
	p, err = natsperm.For("ns", natsperm.Producer)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p.PublishDeny, "$JS.API.CONSUMER.MSG.NEXT.AGATE_ns_DONE."+complete.DurableName) {
		t.Errorf("producer is not denied pulling from %s: deny %v", complete.DurableName, p.PublishDeny)
	}
	if got := events.WorkerDurable("x"); !strings.HasPrefix(got, "worker-") {
		t.Errorf("events.WorkerDurable = %q; the docs and the dead-letter filter expect worker-<type>", got)
	}
}

// Every subject a role may use belongs to its namespace (or is its reply inbox).
func TestPermissionsStayInTheirNamespace(t *testing.T) {
	for _, r := range natsperm.Roles {
		p, err := natsperm.For("billing", r)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append(append([]string{}, p.Publish...), p.Subscribe...) {
			service := strings.HasPrefix(s, "$SRV.") && slices.Contains(strings.Split(s, "."), events.ServiceName("billing"))
			// Only the scheduler listens to the bare $SRV verbs, which micro subscribes to and
			// every service answers: listening lets it reach nobody else's messages.
			bare := r == natsperm.Scheduler && slices.Contains(p.Subscribe, s) &&
				slices.ContainsFunc(natsperm.ServiceVerbs, func(v string) bool { return s == "$SRV."+v })
			if s != "_INBOX.>" && !strings.HasPrefix(s, "agate.billing.") && !strings.Contains(s, ".AGATE_billing_") && !service && !bare {
				t.Errorf("%s may use %s, outside namespace billing", r, s)
			}
		}
	}
	if _, err := natsperm.For("a.b", natsperm.Worker); err == nil {
		t.Error("For accepted namespace a.b")
	}
	if _, err := natsperm.For("ns", "admin"); err == nil {
		t.Error("For accepted role admin")
	}
}

// Producers may read the three streams of events through consumers, and no other stream.
func TestProducerReadsOnlyTheEventStreams(t *testing.T) {
	p, err := natsperm.For("ns", natsperm.Producer)
	if err != nil {
		t.Fatal(err)
	}
	var streams []string
	for _, s := range p.Publish {
		if strings.HasPrefix(s, "$JS.") {
			if !strings.HasPrefix(s, "$JS.API.CONSUMER.CREATE.") && !strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT.") {
				t.Errorf("producer may publish to %s", s)
			}
			i := slices.IndexFunc(strings.Split(s, "."), func(tok string) bool { return strings.HasPrefix(tok, "AGATE_") })
			streams = append(streams, strings.Split(s, ".")[i])
		}
	}
	slices.Sort(streams)
	if want := []string{"AGATE_ns_DONE", "AGATE_ns_DONE", "AGATE_ns_EVENTS", "AGATE_ns_EVENTS", "AGATE_ns_FIRED", "AGATE_ns_FIRED"}; !slices.Equal(streams, want) {
		t.Errorf("producer's consumer rights are on %v; want create and pull on EVENTS, FIRED and DONE", streams)
	}
}

func TestWorkerMayNotManageStreams(t *testing.T) {
	p, err := natsperm.For("ns", natsperm.Worker)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Publish {
		for _, op := range []string{".STREAM.CREATE.", ".STREAM.UPDATE.", ".STREAM.DELETE.", ".STREAM.PURGE.", ".DELETE."} {
			if strings.Contains(s, op) || strings.HasSuffix(s, "$JS.API.>") {
				t.Errorf("worker may publish to %s", s)
			}
		}
	}
}

func TestParseNamespace(t *testing.T) {
	for arg, want := range map[string]natsperm.Namespace{
		"default":          {Name: "default"},
		"billing:billing-": {Name: "billing", UserPrefix: "billing-"},
	} {
		got, err := natsperm.ParseNamespace(arg)
		if err != nil || got != want {
			t.Errorf("ParseNamespace(%q) = %+v, %v; want %+v", arg, got, err, want)
		}
	}
	for _, arg := range []string{"", "a.b", "ns:bad prefix", "ns:a.b"} {
		if _, err := natsperm.ParseNamespace(arg); err == nil {
			t.Errorf("ParseNamespace(%q) succeeded", arg)
		}
	}
	n := natsperm.Namespace{Name: "billing", UserPrefix: "billing-"}
	if u, v := n.User(natsperm.Worker), n.PasswordVar(natsperm.Worker); u != "billing-worker" || v != "NATS_BILLING_WORKER_PASSWORD" {
		t.Errorf("user %q, password variable %q", u, v)
	}
}

func TestConfigRefusesClashingUsers(t *testing.T) {
	for name, nss := range map[string][]natsperm.Namespace{
		"none":           nil,
		"same users":     {{Name: "a"}, {Name: "b"}},
		"same variables": {{Name: "a", UserPrefix: "x-"}, {Name: "b", UserPrefix: "x_"}},
		"same namespace": {{Name: "a", UserPrefix: "p"}, {Name: "a", UserPrefix: "q"}},
	} {
		if _, err := natsperm.Config(nss...); err == nil {
			t.Errorf("%s: Config succeeded", name)
		}
	}
	out, err := natsperm.Config(natsperm.Namespace{Name: "a"}, natsperm.Namespace{Name: "b", UserPrefix: "b-"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"scheduler nats-config --namespace a --namespace b:b-",
		`{user: "worker", password: $NATS_WORKER_PASSWORD, permissions: $WORKER}`,
		`{user: "b-worker", password: $NATS_B_WORKER_PASSWORD, permissions: $B_WORKER}`,
		`"agate.b.done.>"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("configuration lacks %s:\n%s", want, out)
		}
	}
}
