package query

import (
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/schemas"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Every query has a request and a reply schema, and every request schema is a query: a schema
// without code, or code without a schema, is caught before a node starts.
func TestSchemasAreTheQueries(t *testing.T) {
	files, err := fs.Glob(schemas.JSON, "json/query/*.json")
	if err != nil {
		t.Fatal(err)
	}
	var requests []string
	replies := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".json")
		if q, ok := strings.CutSuffix(name, ".reply"); ok {
			replies[q] = true
		} else {
			requests = append(requests, name)
		}
	}
	slices.Sort(requests)
	if !slices.Equal(requests, Names()) {
		t.Errorf("request schemas %v; queries %v", requests, Names())
	}
	for _, q := range Names() {
		if !replies[q] {
			t.Errorf("query %s has no reply schema json/query/%s.reply.json", q, q)
		}
	}
	if _, err := New(Config{Namespace: "ns"}, nil); err != nil {
		t.Errorf("the schemas do not compile: %v", err)
	}
}

func TestCursorBelongsToItsQuery(t *testing.T) {
	c := encodeCursor("list_jobs", Key{Group: "g", Name: "n"})
	var k Key
	if ok, err := decodeCursor("list_jobs", c, &k); !ok || err != nil || k != (Key{Group: "g", Name: "n"}) {
		t.Errorf("decoded %v, %v, %v", k, ok, err)
	}
	for _, bad := range []struct{ query, cursor string }{
		{"list_triggers", c}, {"list_jobs", "%%%"}, {"list_jobs", "e30"}, {"list_jobs", c[:len(c)-3]},
	} {
		if _, err := decodeCursor(bad.query, bad.cursor, &k); err == nil {
			t.Errorf("%s accepted cursor %q", bad.query, bad.cursor)
		}
	}
}
