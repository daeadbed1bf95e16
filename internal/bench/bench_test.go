package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/testenv"
)

func validConfig() Config {
	return Config{Workloads: []string{"burst"}, Output: "table", BurstN: 10, BurstNodes: []int{1},
		SteadyRate: 10, SteadyDuration: time.Second, SteadyNodes: []int{1}, FailoverRate: 10,
		FailoverDuration: 3 * time.Second, FailoverNodes: 2, Workers: 1, Concurrency: 1,
		TriggersPerCommand: 1, InFlight: 1, LockMode: "partitioned", Partitions: 8, Timeout: time.Second}
}

func TestValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid configuration refused: %v", err)
	}
	for name, change := range map[string]func(*Config){
		"workload":     func(c *Config) { c.Workloads = []string{"accept"} },
		"output":       func(c *Config) { c.Output = "yaml" },
		"count":        func(c *Config) { c.BurstN = 0 },
		"pg-set":       func(c *Config) { c.PGSet = []string{"x; drop database y=1"} },
		"short run":    func(c *Config) { c.SteadyDuration = time.Millisecond },
		"intake":       func(c *Config) { c.Workloads = []string{"intake"}; c.IntakeN = 0 },
		"failover":     func(c *Config) { c.Workloads = []string{"failover"}; c.FailoverNodes = 1 },
		"per command":  func(c *Config) { c.TriggersPerCommand = 101 },
		"in flight":    func(c *Config) { c.InFlight = 0 },
		"profile secs": func(c *Config) { c.Profile = "/tmp/p"; c.ProfileSeconds = 0 },
		"rounds":       func(c *Config) { c.Rounds = MaxRounds + 1 },
	} {
		c := validConfig()
		change(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: invalid configuration accepted", name)
		}
	}
}

// With rounds, each round is reported with its own rows, then the medians, the range of the
// end-to-end rate and Agate's ratio to the peer of the same round.
func TestReportSumsRoundsUp(t *testing.T) {
	agate := func(round int, e2e float64) Result {
		return Result{Round: round, System: "agate", Workload: "burst", Param: "N=10", Nodes: 2, Fired: 10, Expected: 10, E2EPerSec: e2e,
			FiresPerSec: e2e, AppliedAfterT0Sec: 20 / e2e, CPU: map[string]float64{"postgres": 0.001}}
	}
	river := func(round int, e2e float64) Result {
		return Result{Round: round, System: "river", Workload: "burst", Param: "N=10", Nodes: 2, Completed: 10, E2EPerSec: e2e}
	}
	var b strings.Builder
	writeReport(&b, Report{Rounds: 3, Env: envInfo{PGSettings: map[string]string{}},
		Results: []Result{agate(1, 100), agate(2, 300), agate(3, 200)},
		Peers:   []Result{river(1, 200), river(2, 300), river(3, 100)},
		Intake:  []IntakeResult{{Round: 1, Path: "cmd", Nodes: 2, PerSec: 10}, {Round: 2, Path: "cmd", Nodes: 2, PerSec: 30}, {Round: 3, Path: "cmd", Nodes: 2, PerSec: 20}}})
	out := b.String()
	for _, want := range []string{
		"## Round 1 of 3", "## Round 3 of 3", "## Over 3 rounds",
		"| agate | burst | N=10 | 2 | 3 | 200 (100–300) | 100 | 200 |", // applied/s: half the e2e/s
		"| agate (2) | river (2) | 100 | 200 | ×0.50 | 50 | ×0.25 |",
		"| agate (2) | river | 0.50, 1.00, 2.00 | ×1.00 |",
		"| cmd | 2 | 10, 30, 20 | 20 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	// Round 2's section holds its rows only.
	r2 := out[strings.Index(out, "## Round 2 of 3"):strings.Index(out, "## Round 3 of 3")]
	if !strings.Contains(r2, "| 300 | 300 |") || strings.Contains(r2, "| 100 | 100 |") || strings.Contains(r2, "| 200 | 200 |") {
		t.Errorf("round 2's section:\n%s", r2)
	}
}

// The summary gives a burst's rate on more nodes against the fewest, round by round.
func TestReportComparesNodeCounts(t *testing.T) {
	burst := func(round, nodes int, e2e float64) Result {
		return Result{Round: round, System: "agate", Workload: "burst", Param: "N=10", Nodes: nodes, Fired: 10, Expected: 10,
			E2EPerSec: e2e}
	}
	var b strings.Builder
	writeReport(&b, Report{Rounds: 2, Env: envInfo{PGSettings: map[string]string{}},
		Results: []Result{burst(1, 2, 100), burst(1, 4, 150), burst(2, 4, 50), burst(2, 2, 200)}})
	if want := "| 4 | 2 | 1.50, 0.25 | ×0.88 |"; !strings.Contains(b.String(), want) {
		t.Errorf("the report lacks %q:\n%s", want, b.String())
	}
}

// A round in which the hypervisor took a tenth of the cores from either run is marked, with the
// median of the other rounds beside the median of all, in both tables of ratios.
func TestReportMarksStolenRounds(t *testing.T) {
	run := func(system string, round, nodes int, e2e, steal float64) Result {
		return Result{Round: round, System: system, Workload: "burst", Param: "N=10", Nodes: nodes, Fired: 10, Expected: 10,
			E2EPerSec: e2e, Machine: &Machine{StealPct: steal}}
	}
	var b strings.Builder
	writeReport(&b, Report{Rounds: 3, Env: envInfo{PGSettings: map[string]string{}},
		Results: []Result{run("agate", 1, 2, 100, 0.2), run("agate", 1, 4, 68, 1.7),
			run("agate", 2, 2, 100, 0), run("agate", 2, 4, 54, 36.0),
			run("agate", 3, 2, 100, 3.5), run("agate", 3, 4, 93, 3.1)},
		Peers: []Result{run("river", 1, 2, 50, 9.9), run("river", 2, 2, 50, 0), run("river", 3, 2, 50, 0)}})
	for _, want := range []string{
		"| 4 | 2 | 0.68, 0.54*, 0.93 | ×0.68 (×0.81 without *) |",
		"| agate (4) | river | 1.36, 1.08*, 1.86 | ×1.36 (×1.61 without *) |",
		"| agate (2) | river | 2.00, 2.00, 2.00 | ×2.00 |", // 9.9 % is under the mark
		"\\* the hypervisor took 10 % or more",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, b.String())
		}
	}
}

// Even rounds run the node counts in reverse, so that none always runs first in its round.
func TestRoundOrderAlternates(t *testing.T) {
	counts := []int{2, 4}
	for round, want := range map[int][]int{1: {2, 4}, 2: {4, 2}, 3: {2, 4}} {
		if got := roundOrder(counts, round); !slices.Equal(got, want) {
			t.Errorf("round %d: %v, want %v", round, got, want)
		}
	}
	if !slices.Equal(counts, []int{2, 4}) {
		t.Errorf("roundOrder changed its argument: %v", counts)
	}
}

// A flow falls behind when too few fires get through or its lateness doubles from the first
// window to the last, at the median or the p99.
func TestBacklogGrows(t *testing.T) {
	win := func(p50, p99 float64) Window { return Window{P50Ms: p50, P99Ms: p99} }
	for _, c := range []struct {
		name   string
		ws     []Window
		rate   float64
		growth bool
	}{
		{"keeps pace", []Window{win(10, 30), win(12, 40), win(11, 35)}, 5000, false},
		{"a steady lag", []Window{win(539, 1390), win(557, 1526), win(654, 1450), win(580, 1201)}, 4820, false},
		{"the median grows", []Window{win(444, 1430), win(727, 1565), win(1035, 3228), win(1782, 2736)}, 4646, true},
		{"the p99 grows", []Window{win(10, 60), win(12, 90), win(14, 130)}, 5000, true},
		{"doubles but stays small", []Window{win(5, 20), win(30, 60)}, 5000, false},
		{"too few fires", []Window{win(10, 30), win(10, 30)}, 4400, true},
		{"one window", []Window{win(10, 30)}, 5000, false},
	} {
		if got := backlogGrows(c.ws, c.rate, 5000); got != c.growth {
			t.Errorf("%s: backlogGrows = %v, want %v", c.name, got, c.growth)
		}
	}
}

// A peer's rows are listed beside Agate's in the report, which points at no file outside the
// repository.
func TestReportListsPeers(t *testing.T) {
	var b strings.Builder
	writeReport(&b, Report{Env: envInfo{Command: "go run ./cmd/agatebench", PGSettings: map[string]string{}},
		Results: []Result{{System: "agate", Workload: "burst", Nodes: 2, CPU: map[string]float64{"postgres": 1}}},
		Peers:   []Result{{System: "quartz", Workload: "burst", Nodes: 2}}})
	out := b.String()
	if !strings.Contains(out, "| quartz | burst |") || !strings.Contains(out, "| agate | burst |") {
		t.Errorf("the report does not list both systems:\n%s", out)
	}
	for _, bad := range []string{"/work/", "../shared", "RESULTS.md"} {
		if strings.Contains(out, bad) {
			t.Errorf("the report refers to %q:\n%s", bad, out)
		}
	}
}

// The CPU split reads /proc: this process has used some CPU by now.
func TestProcCPU(t *testing.T) {
	for range 1_000_000 {
		_ = strings.Repeat("x", 8)
	}
	if got := cpuSeconds(map[string][]int{"bench": {os.Getpid()}})["bench"]; got <= 0 {
		t.Errorf("CPU seconds of this process: %v", got)
	}
}

// TestBurstBlackBox runs the burst workload as agatebench does (built binaries, nats-server,
// two scheduler and two worker processes, commands on the api subject, figures from the FIRED
// and DONE streams) at N=1000 and checks what must hold whatever the machine's speed: every
// fire completed once, none doubled.
func TestBurstBlackBox(t *testing.T) {
	c := validConfig()
	c.DatabaseURL = testenv.Database(t)
	c.Output = "json"
	c.BurstN, c.BurstNodes = 1000, []int{2}
	c.Workers, c.Concurrency, c.InFlight = 2, 200, 64
	c.Timeout = 30 * time.Second
	c.FiresOut = t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out, logs bytes.Buffer
	start := time.Now()
	if err := Run(ctx, c, &out, &logs); err != nil {
		t.Fatalf("bench run: %v\n%s", err, logs.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("the JSON report does not decode: %v\n%s", err, out.String())
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want 1:\n%s", len(rep.Results), out.String())
	}
	r := rep.Results[0]
	if r.TimedOut || r.Duplicates != 0 || r.Missing != 0 || r.Completed != 1000 || r.Fired != 1000 || r.Unexpected != 0 {
		t.Errorf("burst of 1000 on 2 nodes: timed out %v, completed %d, fired %d, duplicates %d, missing %d, unexpected %d\n%s",
			r.TimedOut, r.Completed, r.Fired, r.Duplicates, r.Missing, r.Unexpected, logs.String())
	}
	if len(r.PerNode) == 0 || r.CPU["scheduler n1"] <= 0 && r.CPU["scheduler n2"] <= 0 {
		t.Errorf("no fires per node (%v) or no scheduler CPU (%v)", r.PerNode, r.CPU)
	}
	// The CPU to the last completion stored is part of the CPU to every completion applied.
	if toDone, all := cpuTotal(r.CPUToCompleted), cpuTotal(r.CPU); toDone <= 0 || toDone > all+0.05 ||
		r.MeasuredToCompletedSec <= 0 || r.MeasuredToCompletedSec > r.MeasuredSec {
		t.Errorf("CPU to the last completion %.2f s in %.2f s, to applied %.2f s in %.2f s", toDone, r.MeasuredToCompletedSec, all, r.MeasuredSec)
	}
	// The completions' JobDeleted events are read back from the EVENTS stream: the first
	// was logged after T0, and no more were logged before the last fire than completions came.
	if r.FirstAppliedAfterT0Sec <= 0 || r.AppliedBeforeLastFire > r.Completed {
		t.Errorf("first completion applied at T0%+.3f s, %d applied before the last fire of %d", r.FirstAppliedAfterT0Sec,
			r.AppliedBeforeLastFire, r.Completed)
	}
	// --fires-out: a row a fire, after the header.
	if f, err := os.Open(r.FiresFile); err != nil {
		t.Errorf("the fires file: %v", err)
	} else {
		rows, err := csv.NewReader(f).ReadAll()
		_ = f.Close()
		if err != nil || len(rows) < 2 || len(rows) != 1+r.Fired || len(rows[1]) != 4 {
			t.Errorf("the fires file %s has %d rows (error %v), want a header and one for each of the %d fires", r.FiresFile, len(rows), err, r.Fired)
		}
	}
	// Each workload's database is dropped when it ends (KeepDatabases is off).
	conn, err := pgx.Connect(ctx, c.DatabaseURL)
	if err != nil {
		t.Fatalf("connecting to count the bench databases: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var left []string
	if err := conn.QueryRow(ctx, `select coalesce(array_agg(datname), '{}') from pg_database where datname like 'agatebench\_%'`).Scan(&left); err != nil {
		t.Fatalf("listing the bench databases: %v", err)
	}
	if len(left) > 0 {
		t.Errorf("bench databases left after the run: %v", left)
	}
	t.Logf("burst of 1000 measured in %s: %.0f fires/s, fire lateness p99 %.1f ms, per node %v",
		time.Since(start).Round(time.Millisecond), r.FiresPerSec, r.FireLate.P99Ms, r.PerNode)
}
