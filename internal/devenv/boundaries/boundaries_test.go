package boundaries

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/agatesched/agate"

// steps are the lifecycle step packages: each is wired by internal/node (or run by cmd/worker)
// and knows the others only through interfaces it declares. internal/query, the read side
// beside the lifecycle, is held to the same rule.
var steps = []string{
	module + "/internal/command",
	module + "/internal/query",
	module + "/internal/acquire",
	module + "/internal/fire",
	module + "/internal/complete",
	module + "/internal/recovery",
	module + "/internal/worker",
}

// leaves must import no package of this module: everyone imports them.
var leaves = []string{
	module + "/internal/events",
	module + "/internal/trigger",
}

// cmdAllowed is what each binary may import from this module, and cmdDrivers the drivers no
// binary may import: cmd/ only reads flags and calls one library that owns the wiring (node for
// a scheduler node, devcluster for dev, worker for the worker, bench for the benchmark), plus the
// shared process plumbing (cli, natsconn, telemetry) and event names from events. The database
// and JetStream stay behind those libraries. cmd/scheduler also opens the store for `migrate`,
// runs replay's library for `replay` and prints natsperm's configuration for `nats-config`,
// agatectl reads cron expressions with trigger and talks to a cluster only through the public
// client, as any producer does, and cmd/worker opens JetStream for worker.New,
// whose signature takes one (the exception goes when the worker takes a *nats.Conn).
var (
	cmdCommon  = []string{"/internal/cli", "/internal/natsconn", "/internal/telemetry", "/internal/events"}
	cmdAllowed = map[string][]string{
		module + "/cmd/scheduler":  {"/internal/node", "/internal/store", "/internal/replay", "/internal/devenv/devcluster", "/internal/natsperm", "/internal/webui", "/internal/httpserve"},
		module + "/cmd/worker":     {"/internal/worker", "github.com/nats-io/nats.go/jetstream"},
		module + "/cmd/agatectl":   {"/internal/trigger", "/client"},
		module + "/cmd/agatebench": {"/internal/bench", "/internal/node"},
		module + "/cmd/agatechaos": {"/internal/chaos"},
	}
	cmdDrivers = []string{"github.com/jackc/pgx/v5", "github.com/nats-io/nats.go/jetstream"}
)

// devenvUsers may import internal/devenv: the dev and test tools that start PostgreSQL and NATS.
var devenvUsers = []string{module + "/internal/bench", module + "/internal/chaos", module + "/cmd"}

// pkg is the part of `go list -json` the rules read.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("finding the module root: %v", err)
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports", "./...")
	cmd.Dir = strings.TrimSpace(string(root))
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list ./...: %v\n%s", err, stderr)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("reading go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages; is it run from the module?", len(pkgs))
	}
	return pkgs
}

func under(path, prefix string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }

func underAny(path string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return under(path, p) })
}

func inModule(path string) bool { return under(path, module) }

// violations applies the rules to every package and returns one message per broken rule.
func violations(pkgs []pkg) []string {
	var out []string
	add := func(from, to, rule string) {
		out = append(out, fmt.Sprintf("%s imports %s: %s", from, to, rule))
	}
	devenv := module + "/internal/devenv"
	testenv := devenv + "/testenv"
	testnode := devenv + "/testnode"
	// What talks to a cluster from outside tests against a node run by testnode.
	testnodeUsers := []string{module + "/client", module + "/internal/webui"}
	for _, p := range pkgs {
		from := p.ImportPath
		tests := append(append([]string{}, p.TestImports...), p.XTestImports...)
		isStep := slices.Contains(steps, from)
		for _, to := range p.Imports {
			switch {
			case isStep && slices.Contains(steps, to) && to != from:
				add(from, to, "a lifecycle step must not import another step; declare an interface and let internal/node wire them")
			case isStep && (to == module+"/internal/node" || under(to, devenv) || underAny(to, devenvUsers)):
				add(from, to, "a lifecycle step must not import internal/node, internal/devenv, internal/bench, internal/chaos or cmd")
			case slices.Contains(leaves, from) && inModule(to):
				add(from, to, "internal/events and internal/trigger are leaves and import no package of this module")
			case under(to, devenv) && !under(from, devenv) && !underAny(from, devenvUsers):
				add(from, to, "only internal/devenv, internal/bench, internal/chaos and cmd may import internal/devenv outside tests")
			}
		}
		for _, to := range tests {
			switch {
			case isStep && slices.Contains(steps, to) && to != from:
				add(from, to, "a lifecycle step's tests must not import another step")
			case under(to, devenv) && to != testenv && !(to == testnode && slices.Contains(testnodeUsers, from)) &&
				!under(from, devenv) && !underAny(from, devenvUsers):
				add(from, to, "test files outside internal/devenv, internal/bench, internal/chaos and cmd may import only internal/devenv/testenv "+
					"(and the client's and the web UI's, testnode) from internal/devenv")
			}
		}
		if under(from, module+"/cmd") {
			allowed, known := cmdAllowed[from]
			if !known {
				add(from, "(its imports)", "a new binary needs its entry in cmdAllowed")
				continue
			}
			for _, to := range p.Imports {
				ok := slices.Contains(allowed, to) || slices.ContainsFunc(append(allowed, cmdCommon...), func(a string) bool {
					return strings.HasPrefix(a, "/") && to == module+a
				})
				switch {
				case ok:
				case underAny(to, cmdDrivers):
					add(from, to, "cmd must not use the database or JetStream drivers; the library it calls owns them")
				case inModule(to):
					add(from, to, "cmd may import only its library and the shared plumbing listed in cmdAllowed")
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestImportBoundaries(t *testing.T) {
	for _, v := range violations(listPackages(t)) {
		t.Error(v)
	}
}

// TestRulesCatchViolations feeds the rules one package breaking each, so that a rule that
// silently stopped matching (a renamed package, a typo in a path) fails here.
func TestRulesCatchViolations(t *testing.T) {
	m := func(s string) string { return module + s }
	pkgs := []pkg{
		{ImportPath: m("/internal/acquire"), Imports: []string{m("/internal/fire"), m("/internal/node")}},
		{ImportPath: m("/internal/events"), Imports: []string{m("/internal/store")}},
		{ImportPath: m("/internal/trigger"), Imports: []string{m("/internal/events")}},
		{ImportPath: m("/internal/store"), Imports: []string{m("/internal/devenv/localpg")},
			XTestImports: []string{m("/internal/devenv/testenv"), m("/internal/devenv/natsembed")}},
		{ImportPath: m("/cmd/scheduler"), Imports: []string{m("/internal/acquire"), "github.com/jackc/pgx/v5/pgxpool", m("/internal/node")}},
		{ImportPath: m("/cmd/newtool")},
	}
	got := violations(pkgs)
	for _, want := range []string{
		m("/internal/acquire") + " imports " + m("/internal/fire") + ": a lifecycle step must not import another step",
		m("/internal/acquire") + " imports " + m("/internal/node") + ": a lifecycle step must not import internal/node",
		m("/internal/events") + " imports " + m("/internal/store") + ": internal/events and internal/trigger are leaves",
		m("/internal/trigger") + " imports " + m("/internal/events") + ": internal/events and internal/trigger are leaves",
		m("/internal/store") + " imports " + m("/internal/devenv/localpg") + ": only internal/devenv",
		m("/internal/store") + " imports " + m("/internal/devenv/natsembed") + ": test files outside",
		m("/cmd/scheduler") + " imports " + m("/internal/acquire") + ": cmd may import only",
		m("/cmd/scheduler") + " imports github.com/jackc/pgx/v5/pgxpool: cmd must not use",
		m("/cmd/newtool") + " imports (its imports): a new binary",
	} {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, want) }) {
			t.Errorf("no violation starting %q; got:\n%s", want, strings.Join(got, "\n"))
		}
	}
	if len(got) != 9 {
		t.Errorf("got %d violations, want 9:\n%s", len(got), strings.Join(got, "\n"))
	}
}
