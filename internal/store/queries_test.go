package store

import "testing"

func TestParseQueries(t *testing.T) {
	q := ParseQueries("-- name: A\nselect 1;\n\n-- name: B\n-- a comment that documents B\nupdate x\nset y = 1;\n")
	if got := q.Get("A"); got != "select 1;" {
		t.Errorf("A = %q", got)
	}
	if got := q.Get("B"); got != "-- a comment that documents B\nupdate x\nset y = 1;" {
		t.Errorf("B = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("an unknown query name did not panic")
		}
	}()
	q.Get("C")
}
