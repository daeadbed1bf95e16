package schemas_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agatesched/agate/schemas"
)

// contractPath is the wire contract, relative to this package's directory (where go test runs);
// messages name it contractName, from the repository root, so editors can jump to the line.
const (
	contractPath = "../docs/contract.md"
	contractName = "docs/contract.md"
)

// schemaBase is the prefix of every schema's $id: <schemaBase><dir>/<file>.json.
const schemaBase = "https://agate.dev/schemas/"

// marker introduces a JSON example that is a command, query, reply or event body: the fenced block on the
// next line must validate against the named schema (json/<name>.json).
var marker = regexp.MustCompile(`^<!--\s*schema:\s*(\S+)\s*-->\s*$`)

// example is one marked JSON block of the contract.
type example struct {
	schema string // "command/schedule_job", "event/JobFired"
	line   int    // line of the opening fence
	body   string
}

// TestContractExamples keeps docs/contract.md and the JSON Schemas in step: every JSON block
// marked <!-- schema: dir/name --> must be valid against that schema; every command and query
// schema needs a "### `name`" section; every schema needs at least one example, so every query
// shows a request and a reply.
func TestContractExamples(t *testing.T) {
	t.Parallel()
	compiled := compileAll(t)
	doc, err := os.ReadFile(contractPath)
	if err != nil {
		t.Fatalf("reading the contract %s: %v", contractName, err)
	}
	examples, headings := scanContract(t, doc)

	used := map[string]int{}
	for _, ex := range examples {
		sch, ok := compiled[ex.schema]
		if !ok {
			t.Errorf("%s:%d: marker names schema %q; there is no json/%s.json", contractName, ex.line, ex.schema, ex.schema)
			continue
		}
		used[ex.schema]++
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(ex.body))
		if err != nil {
			t.Errorf("%s:%d: the %s example is not JSON: %v", contractName, ex.line, ex.schema, err)
			continue
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s:%d: the example does not match json/%s.json:\n%v", contractName, ex.line, ex.schema, err)
		}
	}
	for name := range compiled {
		if name == "event/envelope" {
			continue // every event example is checked against it through its own schema
		}
		if used[name] == 0 {
			t.Errorf("json/%s.json has no example in %s (mark one with <!-- schema: %s -->)", name, contractName, name)
		}
		if cmd, ok := strings.CutPrefix(name, "command/"); ok && !headings["`"+cmd+"`"] {
			t.Errorf("command %s has a schema (json/%s.json) but no \"### `%s`\" section in %s", cmd, name, cmd, contractName)
		}
		// A query has a request schema (query/<name>) and a reply schema (query/<name>.reply),
		// each with an example, and a section; error.reply is the reply of every failed query.
		if q, ok := strings.CutPrefix(name, "query/"); ok {
			if req, isReply := strings.CutSuffix(q, ".reply"); isReply {
				if _, ok := compiled["query/"+req]; !ok && req != "error" {
					t.Errorf("json/%s.json is the reply of query %s, which has no request schema json/query/%s.json", name, req, req)
				}
			} else {
				if !headings["`"+q+"`"] {
					t.Errorf("query %s has a schema (json/%s.json) but no \"### `%s`\" section in %s", q, name, q, contractName)
				}
				if _, ok := compiled[name+".reply"]; !ok {
					t.Errorf("query %s has no reply schema json/%s.reply.json", q, name)
				}
			}
		}
	}
	if len(examples) == 0 {
		t.Fatalf("%s has no marked examples", contractName)
	}
	t.Logf("%d examples checked against %d schemas", len(examples), len(compiled))
}

// compileAll compiles every schema under json/, keyed "dir/name" (without .json).
func compileAll(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat() // examples must use real RFC 3339 times and UUIDs
	files, err := fs.Glob(schemas.JSON, "json/*/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no schemas embedded under json/")
	}
	names := make([]string, 0, len(files))
	for _, f := range files {
		raw, err := fs.ReadFile(schemas.JSON, f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(f, "json/"), ".json")
		if err := c.AddResource(schemaBase+name+".json", doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		names = append(names, name)
	}
	out := make(map[string]*jsonschema.Schema, len(names))
	for _, name := range names {
		sch, err := c.Compile(schemaBase + name + ".json")
		if err != nil {
			t.Fatalf("compiling json/%s.json: %v", name, err)
		}
		out[name] = sch
	}
	return out
}

// scanContract returns the marked examples of doc and the first word of each level-3 heading.
func scanContract(t *testing.T, doc []byte) ([]example, map[string]bool) {
	t.Helper()
	var examples []example
	headings := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(doc))
	line := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		line++
		return sc.Text(), true
	}
	for {
		text, ok := next()
		if !ok {
			break
		}
		if h, ok := strings.CutPrefix(text, "### "); ok {
			if f := strings.Fields(h); len(f) > 0 {
				headings[f[0]] = true // "### `schedule_job`: …" names schedule_job
			}
			continue
		}
		m := marker.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		markerLine := line
		fence, ok := next()
		if !ok || strings.TrimSpace(fence) != "```json" {
			t.Errorf("%s:%d: a schema marker must be followed by a ```json fence", contractName, markerLine)
			continue
		}
		ex := example{schema: path.Clean(m[1]), line: line}
		var body strings.Builder
		closed := false
		for {
			text, ok := next()
			if !ok {
				break
			}
			if strings.TrimSpace(text) == "```" {
				closed = true
				break
			}
			fmt.Fprintln(&body, text)
		}
		if !closed {
			t.Errorf("%s:%d: the JSON block is not closed", contractName, ex.line)
			continue
		}
		ex.body = body.String()
		examples = append(examples, ex)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return examples, headings
}
