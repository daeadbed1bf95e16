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

// TestCronParseParity feeds the random cron-like strings of testdata/quartz/cron-parse.jsonl
// (generated with the real Quartz 2.3.2 by GenParse.java) to ParseCron: what Quartz rejects
// must be rejected; what it accepts must be accepted with the same next times, except the
// expressions Quartz accepts but cannot evaluate (it throws or never returns), which must be
// rejected with a message.
func TestCronParseParity(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join("testdata", "quartz", "cron-parse.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var agree, total int
	sc := bufio.NewScanner(f)
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for sc.Scan() {
		var v struct {
			Expr     string   `json:"expr"`
			Accepted bool     `json:"accepted"`
			Next     []string `json:"next"`
			Eval     string   `json:"eval"`
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		total++
		c, err := ParseCron(v.Expr)
		switch {
		case !v.Accepted:
			if err == nil {
				t.Errorf("%q: accepted, Quartz rejects it", v.Expr)
				continue
			}
		case v.Eval != "":
			if err == nil {
				t.Errorf("%q: accepted, but Quartz cannot evaluate it (%s)", v.Expr, v.Eval)
				continue
			}
		default:
			if err != nil {
				t.Errorf("%q: rejected (%v), Quartz accepts it", v.Expr, err)
				continue
			}
			var got []string
			at := from
			for range 3 {
				n, ok := c.Next(at, time.UTC)
				if !ok {
					break
				}
				got = append(got, FormatTime(n))
				at = n
			}
			if strings.Join(got, " ") != strings.Join(v.Next, " ") {
				t.Errorf("%q:\n got  %v\n want %v", v.Expr, got, v.Next)
				continue
			}
		}
		agree++
	}
	t.Logf("cron-parse.jsonl: %d/%d agree", agree, total)
}
