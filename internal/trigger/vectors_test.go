package trigger

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// vectorsDir is where the Quartz reference vectors live (see its README.md): tests run with
// the package directory as working directory, so the path is relative to it.
const vectorsDir = "testdata/vectors"

// vectorCounts is how many cases each vector file holds (its README lists them), so that a
// truncated or half-copied file fails the tests instead of quietly checking less.
var vectorCounts = map[string]int{
	"cron-valid.jsonl":             14740,
	"cron-invalid.jsonl":           61,
	"cron-accepted-oddities.jsonl": 26,
	"misfire.jsonl":                288,
}

// readVectors decodes every line of a JSONL vector file into a fresh T.
func readVectors[T any](t *testing.T, name string) []T {
	t.Helper()
	f, err := os.Open(filepath.Join(vectorsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s:%d: %v", name, line, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if want, ok := vectorCounts[name]; !ok || len(out) != want {
		t.Fatalf("%s: %d vectors, want %d (vectorCounts and testdata/vectors/README.md list every file)", name, len(out), want)
	}
	return out
}

type cronVector struct {
	Expr       string    `json:"expr"`
	TZ         string    `json:"tz"`
	From       string    `json:"from"`
	Next       *[]string `json:"next"`
	Normalized string    `json:"normalized"`
	Error      string    `json:"error"`
}

// formatVectorTime renders t as the vectors do: RFC 3339 in the zone's offset, Z for zero,
// milliseconds only when non-zero.
func formatVectorTime(t time.Time) string {
	return FormatTime(t)
}

func checkCronVector(t *testing.T, v cronVector) (ok bool) {
	t.Helper()
	loc, err := time.LoadLocation(v.TZ)
	if err != nil {
		t.Errorf("%q: zone %q: %v", v.Expr, v.TZ, err)
		return false
	}
	from, err := time.Parse(time.RFC3339Nano, v.From)
	if err != nil {
		t.Errorf("%q: from %q: %v", v.Expr, v.From, err)
		return false
	}
	c, err := ParseCron(v.Expr)
	if err != nil {
		t.Errorf("%q: rejected: %v", v.Expr, err)
		return false
	}
	var got []string
	at := from
	for range 5 {
		n, ok := c.Next(at, loc)
		if !ok {
			break
		}
		got = append(got, formatVectorTime(n.In(loc)))
		at = n
	}
	want := *v.Next
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%q tz=%s from=%s:\n got  %v\n want %v", v.Expr, v.TZ, v.From, got, want)
		return false
	}
	return true
}

func TestCronValidVectors(t *testing.T) {
	t.Parallel()
	vs := readVectors[cronVector](t, "cron-valid.jsonl")
	agree := 0
	for _, v := range vs {
		if checkCronVector(t, v) {
			agree++
		}
	}
	t.Logf("cron-valid.jsonl: %d/%d agree", agree, len(vs))
}

func TestCronInvalidVectors(t *testing.T) {
	t.Parallel()
	vs := readVectors[cronVector](t, "cron-invalid.jsonl")
	agree := 0
	for _, v := range vs {
		_, err := ParseCron(v.Expr)
		if err == nil {
			t.Errorf("%q accepted; Quartz rejects it: %s", v.Expr, v.Error)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "position ") {
			t.Errorf("%q: message %q does not say where", v.Expr, msg)
			continue
		}
		agree++
	}
	t.Logf("cron-invalid.jsonl: %d/%d rejected with a located message", agree, len(vs))
}

func TestCronOddityVectors(t *testing.T) {
	t.Parallel()
	vs := readVectors[cronVector](t, "cron-accepted-oddities.jsonl")
	agree := 0
	for _, v := range vs {
		if v.Next == nil {
			// Quartz parses these but throws at evaluation time: we reject them at parse time.
			_, err := ParseCron(v.Expr)
			if err == nil {
				t.Errorf("%q accepted; Quartz cannot evaluate it, so it must be rejected", v.Expr)
				continue
			}
			t.Logf("%q rejected on purpose: %v", v.Expr, err)
			agree++
			continue
		}
		if !checkCronVector(t, v) {
			continue
		}
		c, _ := ParseCron(v.Expr)
		if c.String() != v.Normalized {
			t.Errorf("%q: String() = %q, Quartz normalises to %q", v.Expr, c.String(), v.Normalized)
			continue
		}
		agree++
	}
	t.Logf("cron-accepted-oddities.jsonl: %d/%d agree", agree, len(vs))
}
