package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Report is everything one run prints: Agate's results, optional peer rows (other schedulers'
// runs of the same workloads, listed beside them) and the intake measurements.
type Report struct {
	Env envInfo `json:"environment"`
	// Rounds is how many times the workloads ran; each row says its round.
	Rounds  int      `json:"rounds"`
	Results []Result `json:"results"`
	Peers   []Result `json:"peers,omitempty"`
	// PeersSkipped says why a peer of --compare did not run (Quartz without Java).
	PeersSkipped []string       `json:"peersSkipped,omitempty"`
	Intake       []IntakeResult `json:"intake,omitempty"`
}

// envInfo describes where the run happened.
type envInfo struct {
	When       time.Time         `json:"when"`
	Command    string            `json:"command"`
	GoVersion  string            `json:"goVersion"`
	CPUs       int               `json:"cpus"`
	PostgreSQL string            `json:"postgresql"`
	PGSettings map[string]string `json:"pgSettings"`
	PrivatePG  bool              `json:"privatePostgres"`
	Processes  string            `json:"processes"`
	NodeConfig string            `json:"nodeConfig"`
	PGSet      []string          `json:"pgSet,omitempty"`
}

func describeEnv(inf *infra, o Config) envInfo {
	pool := "the scheduler's default pool"
	if o.PoolSize > 0 {
		pool = fmt.Sprintf("pool_max_conns=%d", o.PoolSize)
	}
	return envInfo{
		When: time.Now().UTC(), Command: o.CommandLine, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		PostgreSQL: shortVersion(inf.pgInfo), PGSettings: inf.settings, PrivatePG: inf.pg != nil,
		Processes: fmt.Sprintf("nats-server (JetStream file store), `scheduler run` ×K and `worker --concurrency %d` ×%d as separate processes from the built binaries, on 127.0.0.1",
			o.Concurrency, o.Workers),
		NodeConfig: fmt.Sprintf("scheduler defaults (batch 500, fire-ahead 200ms), --lock-mode %s --partitions %d --partitions-at-once %d, %s; %d trigger(s) per schedule_job, %d requests in flight",
			o.LockMode, o.Partitions, o.PartitionsAtOnce, pool, o.TriggersPerCommand, o.InFlight),
		PGSet: o.PGSet,
	}
}

func writeJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }

func lat(l Lateness) string {
	return fmt.Sprintf("%s / %s / %s", f1(l.P50Ms), f1(l.P99Ms), f1(l.MaxMs))
}

// writeReport writes the markdown report: the results (and peer rows) in two tables, then per
// workload its CPU split, windows, failover and top statements, then the intake table.
func writeReport(w io.Writer, rep Report) {
	env := rep.Env
	fmt.Fprintf(w, "## agatebench (%s)\n\n", env.When.Format(time.RFC3339))
	fmt.Fprintf(w, "`%s` — %s, %d CPUs, %s (fsync=%s, synchronous_commit=%s, full_page_writes=%s).\n",
		env.Command, env.GoVersion, env.CPUs, env.PostgreSQL, env.PGSettings["fsync"], env.PGSettings["synchronous_commit"],
		env.PGSettings["full_page_writes"])
	fmt.Fprintf(w, "%s. %s.\n", env.Processes, env.NodeConfig)
	if len(env.PGSet) > 0 {
		fmt.Fprintf(w, "Database settings (diagnostic, not defaults): %s.\n", strings.Join(env.PGSet, ", "))
	}
	fmt.Fprintln(w)
	if rep.Rounds <= 1 {
		writeRound(w, rep)
		return
	}
	for round := 1; round <= rep.Rounds; round++ {
		fmt.Fprintf(w, "## Round %d of %d\n\n", round, rep.Rounds)
		writeRound(w, rep.round(round))
	}
	writeRoundsSummary(w, rep)
}

// writeRound writes the tables of one round's rows.
func writeRound(w io.Writer, rep Report) {
	rows := append(slices.Clone(rep.Results), rep.Peers...)
	if len(rows) > 0 {
		writeResults(w, rows)
	}
	if len(rep.Peers) > 0 || len(rep.PeersSkipped) > 0 {
		writeComparison(w, rep)
	}
	for _, r := range rep.Results {
		writeDetails(w, r)
	}
	if len(rep.Intake) > 0 {
		writeIntakeTable(w, rep.Intake)
	}
}

// round is rep with the rows of one round only.
func (rep Report) round(n int) Report {
	keep := func(r Result) bool { return r.Round != n }
	rep.Results = slices.DeleteFunc(slices.Clone(rep.Results), keep)
	rep.Peers = slices.DeleteFunc(slices.Clone(rep.Peers), keep)
	rep.Intake = slices.DeleteFunc(slices.Clone(rep.Intake), func(r IntakeResult) bool { return r.Round != n })
	return rep
}

func writeResults(w io.Writer, rows []Result) {
	fmt.Fprintln(w, "| system | workload | size | nodes | workers | completed | fires/s | e2e/s | dup | missing | commits/fire | writes/fire | fired per node |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		done := fmt.Sprintf("%d/%d", r.Completed, r.Expected)
		if r.TimedOut {
			done += " (timed out)"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %s | %s | %s | %d | %d | %.2f | %.2f | %s |\n",
			r.System, r.Workload, r.Param, r.Nodes, r.Workers, done, f0(r.FiresPerSec), f0(r.E2EPerSec),
			r.Duplicates, r.Missing, r.CommitsPerFire, r.WritesPerFire, perNode(r.PerNode))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | workload | nodes | fire late p50 / p99 / max ms | published late ms | start late ms | e2e late ms | lead s | scheduling s | before T0 s | last fired T0+s | all completed T0+s | applied T0+s | applied before the last fire (first T0+s) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		before := "—"
		if r.FirstAppliedAfterT0Sec != 0 {
			before = fmt.Sprintf("%d (%.3f)", r.AppliedBeforeLastFire, r.FirstAppliedAfterT0Sec)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f | %s |\n", r.System, r.Workload, r.Nodes,
			lat(r.FireLate), lat(r.PublishLate), lat(r.StartLate), lat(r.E2ELate), r.LeadSec, r.SchedulingSec, r.ScheduledBeforeT0Sec,
			r.LastFiredAfterT0Sec, r.AllCompletedAfterT0Sec, r.AppliedAfterT0Sec, before)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "fires/s: burst = fires / (last JobFired.firedTime − T0); steady and failover = fires / (last − first firedTime). "+
		"e2e/s = expected fires / (last completion stored on the DONE stream − T0). "+
		"applied = when the schedulers had applied every completion (their DONE consumer had nothing pending or unacked); CPU figures run to it. "+
		"applied before the last fire (bursts) = completions whose JobDeleted was logged before the last JobFired.firedTime, and when the first was (the EVENTS stream).")
	fmt.Fprintln(w, "Lateness against scheduledTime: fire = JobFired.firedTime, published = when JetStream stored the JobFired (its stream timestamp), start = JobCompleted.startedTime, e2e = when JetStream stored the JobCompleted (its stream timestamp).")
	fmt.Fprintln(w, "dup = (trigger, scheduled time) fired with more than one fireId + fireIds completed more than once; missing = expected (trigger, scheduled time) with no JobCompleted.")
	fmt.Fprintln(w, "commits/fire, writes/fire = pg_stat_database xact_commit, tup_inserted+tup_updated+tup_deleted of the workload database from T0 to the end ÷ fires (background work included).")
	fmt.Fprintln(w)
}

func writeDetails(w io.Writer, r Result) {
	fmt.Fprintf(w, "### %s %s, %d nodes\n\n", r.Workload, r.Param, r.Nodes)
	fmt.Fprintf(w, "CPU s over the %.1f s measured: %s.", r.MeasuredSec, cpuSplit(r.CPU))
	if r.Fired > 0 {
		fmt.Fprintf(w, " In all %.2f s, %.0f µs a fire.", cpuTotal(r.CPU), cpuPerFire(r))
		if t := cpuTotal(r.CPUToCompleted); t > 0 && r.MeasuredToCompletedSec > 0 {
			fmt.Fprintf(w, " Of it, in the %.1f s until the DONE stream held every completion: %s; in all %.2f s, %.0f µs a fire.",
				r.MeasuredToCompletedSec, cpuSplit(r.CPUToCompleted), t, t/float64(r.Fired)*1e6)
		}
	}
	if m := r.Machine; m != nil {
		fmt.Fprintf(w, " The machine from T0 until the DONE stream held every completion (%.2f s): %.2f of its %d cores busy, %.1f %% of their time idle, %.1f %% stolen by the hypervisor.",
			m.Sec, m.BusyCores, runtime.NumCPU(), m.IdlePct, m.StealPct)
	}
	fmt.Fprintln(w)
	if r.DoneMessages > 0 && r.Completions+r.Failed > 0 {
		fmt.Fprintf(w, "The DONE stream held the %d outcomes in %d messages (%.1f a message: workers publish the outcomes that end together in one).\n",
			r.Completions+r.Failed, r.DoneMessages, float64(r.Completions+r.Failed)/float64(r.DoneMessages))
	}
	if r.Failed > 0 || r.Unexpected > 0 || r.Undecodable > 0 || r.DuplicateFires > 0 || r.DuplicateCompletions > 0 {
		fmt.Fprintf(w, "JobFailed %d, unexpected fires %d, undecodable messages %d, duplicate fires %d, duplicate completions %d.\n",
			r.Failed, r.Unexpected, r.Undecodable, r.DuplicateFires, r.DuplicateCompletions)
	}
	if f := r.Failover; f != nil {
		fmt.Fprintf(w, "Failover: %s killed (SIGKILL) at T0+%.1fs; fires due after it: worst fire lateness (the gap) %s ms, reached %.1f s after the kill; %d fired more than 1 s late; %s fired %d before the kill.\n",
			f.Node, f.KilledAfterT0Sec, f1(f.GapMs), f.RecoveredAfterKillSec, f.LateOverOneSec, f.Node, f.FiredByKilledBefore)
	}
	fmt.Fprintf(w, "Tables autovacuum analyzed before T0: %s; during the run: %s (the bench runs no ANALYZE).\n",
		listOrNone(r.AnalyzedBeforeT0), listOrNone(r.AnalyzedDuring))
	fmt.Fprintln(w)
	if len(r.Windows) > 0 {
		fmt.Fprintf(w, "Start lateness by %d s window of scheduled time (backlog grows: %v):\n\n", r.WindowSec, r.BacklogGrows)
		fmt.Fprintln(w, "| window | fires | p50 ms | p99 ms |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, win := range r.Windows {
			fmt.Fprintf(w, "| T0+%ds | %d | %s | %s |\n", win.FromSec, win.Fires, f1(win.P50Ms), f1(win.P99Ms))
		}
		fmt.Fprintln(w)
	}
	writeStatements(w, r.Statements, "fire")
	if len(r.Profiles) > 0 {
		fmt.Fprintf(w, "CPU profiles: %s\n\n", strings.Join(r.Profiles, ", "))
	}
	if r.FiresFile != "" {
		fmt.Fprintf(w, "Every fire: %s\n\n", r.FiresFile)
	}
}

// writeStatements writes the top statements of a measurement, with their calls per unit ("fire"
// or "command").
func writeStatements(w io.Writer, statements []Statement, unit string) {
	if len(statements) == 0 {
		return
	}
	fmt.Fprintln(w, "Top statements (pg_stat_statements, by total time):")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| calls | total ms | rows | calls/%s | query |\n", unit)
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, s := range statements {
		fmt.Fprintf(w, "| %d | %s | %d | %.3f | `%s` |\n", s.Calls, f1(s.TotalMs), s.Rows, s.CallsPer, shorten(s.Query, 140))
	}
	fmt.Fprintln(w)
}

// cpuSplit lists the CPU seconds per process, in a fixed order: postgres, nats-server,
// schedulers, workers, bench.
func cpuSplit(cpu map[string]float64) string {
	rank := func(k string) int {
		for i, p := range []string{"postgres", "nats-server", "scheduler", "worker", "bench"} {
			if strings.HasPrefix(k, p) {
				return i
			}
		}
		return 5
	}
	keys := slices.SortedFunc(maps.Keys(cpu), func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.2f", k, cpu[k])
	}
	return strings.Join(parts, ", ")
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

func shorten(s string, n int) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "`", "'")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func perNode(m map[string]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
