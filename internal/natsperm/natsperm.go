// Package natsperm says what each kind of Agate process may do on NATS, for any namespace, and
// writes it as nats-server configuration (`scheduler nats-config`). deploy/nats/nats.conf is its
// output for namespace "default"; docs/contract.md, "NATS permissions", explains the rules.
//
// It is pure: names in, allow-lists and text out. The durable consumer names below are those of
// internal/command, internal/complete and internal/worker (a test checks they agree).
package natsperm

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/agatesched/agate/internal/events"
)

// Role is a kind of Agate process, and so a NATS user of a namespace.
type Role string

// The roles, in the order configurations list them.
const (
	Scheduler Role = "scheduler"
	Worker    Role = "worker"
	Producer  Role = "producer"
)

// Roles lists every role.
var Roles = []Role{Scheduler, Worker, Producer}

// Durable consumer names, as internal/command, internal/complete and internal/worker use them.
const (
	schedulerCommandsDurable = "scheduler-commands"
	schedulerDoneDurable     = "scheduler-done"
)

// Permissions are the subjects one user may publish to and subscribe to. Anything else is denied.
type Permissions struct {
	Publish   []string
	Subscribe []string
	// PublishDeny are exceptions to Publish: subjects it matches that the user may not use.
	PublishDeny []string
	// AllowResponses lets the user publish once to the reply subject of a request it received
	// (the scheduler answering agate.<ns>.api.* requests).
	AllowResponses bool
}

// MaxDeliveriesAdvisory is the subject of JetStream's MAX_DELIVERIES advisories for the FIRED
// stream's consumers, which workers listen to.
func MaxDeliveriesAdvisory(ns string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + events.StreamFired(ns) + ".*"
}

// For returns the permissions of role in namespace ns.
func For(ns string, role Role) (Permissions, error) {
	if err := events.ValidateNamespace(ns); err != nil {
		return Permissions{}, err
	}
	s := events.Subjects(ns)
	streams := []string{events.StreamCommands(ns), events.StreamFired(ns), events.StreamDone(ns), events.StreamEvents(ns)}
	switch role {
	case Scheduler:
		// Publishes JobFired and the other events, and the final JobFailed of an execution it
		// abandons; creates and updates the four streams at start; consumes COMMANDS and DONE
		// through its two shared durables; reads and lists the state of the workers' durables (to
		// tell a queued fire from an abandoned one, for the workers query and the backlog gauge);
		// hears the workers announce themselves; answers api requests, and the discovery requests
		// of its NATS service: micro subscribes to every $SRV verb bare (all services answer
		// those, so they cannot be held to a namespace), for the service and for its instance.
		p := Permissions{
			Publish: []string{s.All("fired"), s.All("evt"), s.All("done"),
				"$JS.API.CONSUMER.INFO." + events.StreamFired(ns) + ".*",
				"$JS.API.CONSUMER.LIST." + events.StreamFired(ns)},
			Subscribe:      []string{"_INBOX.>", s.API("*"), s.WorkerPresence()},
			AllowResponses: true,
		}
		for _, verb := range ServiceVerbs {
			p.Subscribe = append(p.Subscribe, "$SRV."+verb)
		}
		p.Subscribe = append(p.Subscribe, serviceSubjects(ns)...)
		for _, op := range []string{"CREATE", "UPDATE", "INFO"} {
			for _, st := range streams {
				p.Publish = append(p.Publish, "$JS.API.STREAM."+op+"."+st)
			}
		}
		p.Publish = append(p.Publish, durable(events.StreamCommands(ns), schedulerCommandsDurable)...)
		p.Publish = append(p.Publish, durable(events.StreamDone(ns), schedulerDoneDurable)...)
		return p, nil
	case Worker:
		// Publishes outcomes and announces itself; looks the FIRED and DONE streams up (a scheduler creates them);
		// creates and updates its durables on FIRED, each filtered on one job type's subject;
		// pulls and settles fires; reads a dead-lettered fire back by sequence; asks which fires
		// of a batch delivered again still run (the executing query, read-only).
		fired := events.StreamFired(ns)
		return Permissions{
			Publish: []string{
				s.All("done"),
				s.WorkerPresence(),
				s.API("executing"),
				"$JS.API.STREAM.INFO." + fired,
				"$JS.API.STREAM.INFO." + events.StreamDone(ns),
				"$JS.API.STREAM.MSG.GET." + fired,
				// CONSUMER.CREATE.<stream>.<durable>.<filter subject>: NATS wildcards match whole
				// tokens, so the durable name cannot be held to worker-*; the filter can be held
				// to one job type's fired subject (the server checks it against the request).
				"$JS.API.CONSUMER.CREATE." + fired + ".*." + s.Fired("*"),
				"$JS.API.CONSUMER.INFO." + fired + ".*",
				"$JS.API.CONSUMER.MSG.NEXT." + fired + ".*",
				"$JS.ACK." + fired + ".>",
			},
			Subscribe: []string{"_INBOX.>", MaxDeliveriesAdvisory(ns), s.Evt("interrupt")},
		}, nil
	case Producer:
		// Sends commands, durably or as requests, and queries; watches outcomes; discovers its
		// namespace's service. Not the bare $SRV verbs: every service of the account answers
		// them, other namespaces' schedulers included.
		p := Permissions{
			Publish:   append([]string{s.All("cmd"), s.All("api")}, serviceSubjects(ns)...),
			Subscribe: []string{"_INBOX.>", s.All("evt")},
		}
		// Reads EVENTS, FIRED and DONE (agatectl events, client.Events) through ordered
		// consumers: it creates consumers filtered on the stream's own subjects and pulls from
		// them (no acks). NATS permissions match whole subject tokens, so a consumer name cannot
		// be held to new ephemeral ones: the same rights would let a producer update or pull
		// from an existing consumer of those streams. The scheduler's durable on DONE is
		// denied by name; the workers' worker-<type> on FIRED cannot be, and a producer, who
		// may already delete, pause and interrupt any job, is trusted with them.
		for _, sf := range []struct{ stream, family string }{
			{events.StreamEvents(ns), "evt"}, {events.StreamFired(ns), "fired"}, {events.StreamDone(ns), "done"},
		} {
			p.Publish = append(p.Publish,
				"$JS.API.CONSUMER.CREATE."+sf.stream+".*."+s.All(sf.family),
				"$JS.API.CONSUMER.MSG.NEXT."+sf.stream+".*")
		}
		done := events.StreamDone(ns)
		p.PublishDeny = []string{
			"$JS.API.CONSUMER.CREATE." + done + "." + schedulerDoneDurable + ".>",
			"$JS.API.CONSUMER.MSG.NEXT." + done + "." + schedulerDoneDurable,
		}
		return p, nil
	}
	return Permissions{}, fmt.Errorf("unknown role %q", role)
}

// ServiceVerbs are the discovery requests of a NATS service (nats.go's micro).
var ServiceVerbs = []string{"PING", "INFO", "STATS"}

// serviceSubjects are the discovery subjects of a namespace's service: $SRV.<verb>.agate-<ns>
// (every node) and $SRV.<verb>.agate-<ns>.<id> (one node).
func serviceSubjects(ns string) []string {
	var out []string
	for _, verb := range ServiceVerbs {
		out = append(out, "$SRV."+verb+"."+events.ServiceName(ns), "$SRV."+verb+"."+events.ServiceName(ns)+".*")
	}
	return out
}

// durable is what a shared pull consumer without a filter subject needs: create or update it,
// look it up, pull from it and settle its messages.
func durable(stream, name string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + stream + "." + name,
		"$JS.API.CONSUMER.INFO." + stream + "." + name,
		"$JS.API.CONSUMER.MSG.NEXT." + stream + "." + name,
		"$JS.ACK." + stream + "." + name + ".>",
	}
}

// Namespace is one namespace of a generated configuration, with the prefix of its users' names.
// Several namespaces on one NATS system need different prefixes.
type Namespace struct {
	Name       string
	UserPrefix string
}

var prefixPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{0,32}$`)

// ParseNamespace reads "<ns>" or "<ns>:<user prefix>", the form of `nats-config --namespace`.
func ParseNamespace(arg string) (Namespace, error) {
	name, prefix, _ := strings.Cut(arg, ":")
	n := Namespace{Name: name, UserPrefix: prefix}
	return n, n.validate()
}

func (n Namespace) validate() error {
	if err := events.ValidateNamespace(n.Name); err != nil {
		return err
	}
	if !prefixPattern.MatchString(n.UserPrefix) {
		return fmt.Errorf("user prefix %q is invalid: use at most 32 letters, digits, '_' or '-'", n.UserPrefix)
	}
	return nil
}

// User is the NATS user name of role: the prefix and the role, e.g. "scheduler" or "billing-scheduler".
func (n Namespace) User(role Role) string { return n.UserPrefix + string(role) }

// PasswordVar is the environment variable holding the password of role's user, e.g.
// NATS_SCHEDULER_PASSWORD or NATS_BILLING_SCHEDULER_PASSWORD.
func (n Namespace) PasswordVar(role Role) string { return "NATS_" + n.varName(role) + "_PASSWORD" }

// varName is the prefix and role in upper case, '-' as '_': the name of the role's permissions
// block inside the account.
func (n Namespace) varName(role Role) string {
	return strings.ToUpper(strings.ReplaceAll(n.UserPrefix, "-", "_") + string(role))
}

// roleComments describe each role's block in the generated configuration: who, then what.
var roleComments = map[Role][2]string{
	Scheduler: {"Scheduler nodes", `publish JobFired and the other events, create and update the streams at start,
consume COMMANDS and DONE through their shared durables, answer api requests and the $SRV
discovery requests of their service agate-<ns> (allow_responses: one reply to each request's
reply subject).`},
	Worker: {"Workers", `look the FIRED and DONE streams up (they may not create streams: a scheduler does),
create their durables worker-<type> on FIRED, pull and settle fires, publish outcomes, listen
to MAX_DELIVERIES advisories and read a dead-lettered fire back by sequence.`},
	Producer: {"Producers", `send commands (durably or as requests) and queries, discover the service agate-<ns>
($SRV.PING/INFO/STATS.agate-<ns>), watch events, and read the EVENTS, FIRED and DONE streams
(agatectl events) through ordered consumers: create consumers filtered on the stream's subjects
and pull from them. NATS cannot hold these rights to new consumers, so they also reach existing
ones of those streams: the scheduler's scheduler-done is denied by name, the workers'
worker-<type> cannot be (producers already steer every job). Remove the CONSUMER lines to keep
producers off the streams; agatectl events then fails.`},
}

// Config returns the accounts block of a nats-server configuration: one JetStream-enabled
// account, AGATE, holding the streams of the given namespaces, and per namespace one user per
// role with exactly the permissions of For. Passwords are read from the environment variables
// of PasswordVar. The block goes into a configuration that sets the server-level settings
// (listen ports, JetStream storage, cluster, TLS).
func Config(namespaces ...Namespace) (string, error) {
	if len(namespaces) == 0 {
		return "", fmt.Errorf("no namespace")
	}
	seen := map[string]string{}
	claim := func(kind, v, ns string) error {
		if other, dup := seen[kind+" "+v]; dup {
			return fmt.Errorf("namespaces %q and %q both have the %s %s: give them different user prefixes (<ns>:<prefix>)", other, ns, kind, v)
		}
		seen[kind+" "+v] = ns
		return nil
	}
	var args []string
	for _, n := range namespaces {
		if err := n.validate(); err != nil {
			return "", err
		}
		if _, dup := seen["namespace "+n.Name]; dup {
			return "", fmt.Errorf("namespace %q is listed twice", n.Name)
		}
		seen["namespace "+n.Name] = n.Name
		for _, r := range Roles {
			if err := claim("user", n.User(r), n.Name); err != nil {
				return "", err
			}
			if err := claim("variable", n.varName(r), n.Name); err != nil {
				return "", err
			}
		}
		arg := "--namespace " + n.Name
		if n.UserPrefix != "" {
			arg += ":" + n.UserPrefix
		}
		args = append(args, arg)
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# Generated by `scheduler nats-config %s` (internal/natsperm).\n", strings.Join(args, " "))
	b.WriteString(`# Do not edit by hand: change internal/natsperm and generate again.
#
# One account, AGATE, holds the streams; each kind of process has its own user per namespace, which
# may touch only the subjects of its namespace that its role needs (docs/contract.md, "NATS
# permissions"). Passwords come from the environment variables named in users.
accounts {
  AGATE {
    jetstream: enabled
`)
	for _, n := range namespaces {
		for _, r := range Roles {
			p, err := For(n.Name, r)
			if err != nil {
				return "", err
			}
			b.WriteString("\n")
			c := roleComments[r]
			fmt.Fprintf(&b, "    # %s of namespace %q:\n    # %s\n", c[0], n.Name, strings.ReplaceAll(c[1], "\n", "\n    # "))
			fmt.Fprintf(&b, "    %s = {\n", n.varName(r))
			writeList(&b, "publish", p.Publish, p.PublishDeny)
			writeList(&b, "subscribe", p.Subscribe, nil)
			if p.AllowResponses {
				b.WriteString("      allow_responses: true\n")
			}
			b.WriteString("    }\n")
		}
	}
	b.WriteString("\n    users: [\n")
	for _, n := range namespaces {
		for _, r := range Roles {
			fmt.Fprintf(&b, "      {user: %q, password: $%s, permissions: $%s}\n", n.User(r), n.PasswordVar(r), n.varName(r))
		}
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.String(), nil
}

func writeList(b *strings.Builder, key string, allow, deny []string) {
	fmt.Fprintf(b, "      %s: {\n", key)
	for _, l := range []struct {
		name     string
		subjects []string
	}{{"allow", allow}, {"deny", deny}} {
		if len(l.subjects) == 0 {
			continue
		}
		fmt.Fprintf(b, "        %s: [\n", l.name)
		for _, s := range l.subjects {
			fmt.Fprintf(b, "          %q\n", s)
		}
		b.WriteString("        ]\n")
	}
	b.WriteString("      }\n")
}

// ConfigFromArgs is Config of the namespaces of `nats-config --namespace` arguments, each
// "<ns>" or "<ns>:<user prefix>".
func ConfigFromArgs(args []string) (string, error) {
	nss := make([]Namespace, 0, len(args))
	for _, a := range args {
		n, err := ParseNamespace(a)
		if err != nil {
			return "", fmt.Errorf("--namespace %q: %w", a, err)
		}
		nss = append(nss, n)
	}
	return Config(nss...)
}
