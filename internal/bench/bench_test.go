package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func validConfig() Config {
	return Config{Workloads: []string{"burst"}, Output: "table", BurstN: 10, BurstNodes: []int{1}, AcceptNodes: 2,
		SteadyRate: 10, SteadyDuration: time.Second, SteadyNodes: []int{1}, Workers: 1, Concurrency: 1, PoolSize: 1,
		Timeout: time.Second}
}

func TestValidate(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid configuration refused: %v", err)
	}
	for name, change := range map[string]func(*Config){
		"workload":  func(c *Config) { c.Workloads = []string{"soak"} },
		"output":    func(c *Config) { c.Output = "yaml" },
		"count":     func(c *Config) { c.BurstN = 0 },
		"pg-set":    func(c *Config) { c.PGSet = []string{"x; drop database y=1"} },
		"short run": func(c *Config) { c.SteadyDuration = time.Millisecond },
		"intake":    func(c *Config) { c.Workloads = []string{"intake"}; c.IntakeN = 0 },
	} {
		c := validConfig()
		change(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: invalid configuration accepted", name)
		}
	}
}

// The report names where its baselines come from without pointing at any file outside the
// repository.
func TestReportNamesItsBaselines(t *testing.T) {
	var b strings.Builder
	writeTable(&b, envInfo{Command: "go run ./cmd/agatebench", PGSettings: map[string]string{}}, nil)
	out := b.String()
	if !strings.Contains(out, "Quartz 2.3.2") || !strings.Contains(out, "River v0.51.1") {
		t.Errorf("the report does not name its baselines:\n%s", out)
	}
	for _, bad := range []string{"/work/", "../shared", "RESULTS.md"} {
		if strings.Contains(out, bad) {
			t.Errorf("the report refers to %q:\n%s", bad, out)
		}
	}
}

// The intake workload's CPU split reads /proc: this process has used some CPU by now.
func TestProcCPU(t *testing.T) {
	for range 1_000_000 {
		_ = strings.Repeat("x", 8)
	}
	if got := cpuSeconds(map[string][]int{"bench": {os.Getpid()}})["bench"]; got <= 0 {
		t.Errorf("CPU seconds of this process: %v", got)
	}
}
