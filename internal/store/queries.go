package store

import (
	_ "embed"
	"fmt"
	"io/fs"
	"strings"

	"github.com/agatesched/agate/schemas"
)

func sqlDir() fs.FS {
	sub, err := fs.Sub(schemas.SQL, "sql")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	return sub
}

//go:embed queries.sql
var queriesSQL string

// queries are the store's own statements.
var queries = ParseQueries(queriesSQL)

// Queries splits an embedded .sql file into named statements: each starts at a line
// "-- name: <Name>" and runs to the next one. Packages keep their SQL in such a file instead of
// strings scattered through loops; a missing name is a programmer error caught at start.
type Queries map[string]string

// ParseQueries parses src (the content of a queries.sql file).
func ParseQueries(src string) Queries {
	q := Queries{}
	var name string
	var b strings.Builder
	flush := func() {
		if name != "" {
			q[name] = strings.TrimSpace(b.String())
		}
		b.Reset()
	}
	for line := range strings.SplitSeq(src, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "-- name:"); ok {
			flush()
			name = strings.TrimSpace(rest)
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	flush()
	return q
}

// Get returns the named statement; it panics on an unknown name, which only a code change causes.
func (q Queries) Get(name string) string {
	s, ok := q[name]
	if !ok {
		panic(fmt.Sprintf("store: no query named %q", name))
	}
	return s
}
