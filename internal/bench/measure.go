package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Result is one workload run's figures. A peer's run (Quartz, River) is a Result too, with its
// System, so that one report lists them side by side.
type Result struct {
	Round              int    `json:"round,omitempty"` // of Config.Rounds, from 1
	System             string `json:"system"`          // agate, or the peer's name
	Workload           string `json:"workload"`
	Param              string `json:"param"`
	Nodes              int    `json:"nodes"`
	Workers            int    `json:"workers"`
	Concurrency        int    `json:"concurrency"`
	TriggersPerCommand int    `json:"triggersPerCommand"`
	Expected           int    `json:"expected"`
	// Demand is the fires/s a steady schedule asks for (0 otherwise).
	Demand float64 `json:"demandPerSec,omitempty"`
	// Fired is the distinct fireIds seen on the FIRED stream; Completions the JobCompleted seen
	// on DONE; Completed the expected (trigger, scheduled time) among them; Failed the JobFailed.
	Fired       int `json:"fired"`
	Completions int `json:"completions"`
	Completed   int `json:"completed"`
	Failed      int `json:"failed"`
	// FiresPerSec: burst = fires / (last firedTime − T0); others = fires / (last − first firedTime).
	FiresPerSec float64 `json:"firesPerSec"`
	// E2EPerSec = expected fires / (every completion stored in JetStream − T0).
	E2EPerSec float64 `json:"e2ePerSec"`
	// FireLate = firedTime − scheduledTime; PublishLate = the moment JetStream stored the
	// JobFired − scheduledTime; StartLate = startedTime − scheduledTime; E2ELate = the moment
	// JetStream stored the completion − scheduledTime.
	FireLate    Lateness `json:"fireLateness"`
	PublishLate Lateness `json:"publishLateness"`
	StartLate   Lateness `json:"startLateness"`
	E2ELate     Lateness `json:"e2eLateness"`
	// Duplicates = DuplicateFires ((trigger, scheduled time) with more than one fireId) +
	// DuplicateCompletions (more than one JobCompleted for one fireId).
	Duplicates           int `json:"duplicates"`
	DuplicateFires       int `json:"duplicateFires"`
	DuplicateCompletions int `json:"duplicateCompletions"`
	// Missing: expected (trigger, scheduled time) with no JobCompleted.
	Missing int `json:"missing"`
	// Unexpected: fires of a (trigger, scheduled time) that was not planned.
	Unexpected  int `json:"unexpected"`
	Undecodable int `json:"undecodable,omitempty"`
	// DoneMessages is the messages read from the DONE stream: fewer than the outcomes when
	// workers batched them.
	DoneMessages int            `json:"doneMessages"`
	PerNode      map[string]int `json:"firedPerNode"`
	// CommitsPerFire and WritesPerFire: pg_stat_database xact_commit and tup_inserted +
	// tup_updated + tup_deleted over the measured interval, divided by fires.
	CommitsPerFire float64     `json:"commitsPerFire"`
	WritesPerFire  float64     `json:"writesPerFire"`
	Statements     []Statement `json:"topStatements,omitempty"`
	// CPU is the CPU seconds each process used over the measured interval (MeasuredSec long).
	CPU         map[string]float64 `json:"cpuSeconds"`
	MeasuredSec float64            `json:"measuredSec"`
	// CPUToCompleted is the CPU seconds each process used from the same start (just before T0)
	// until the DONE stream held a completion for every fire, MeasuredToCompletedSec later (the end-to-end rate's interval); the rest of CPU went to
	// applying completions after it.
	CPUToCompleted         map[string]float64 `json:"cpuSecondsToCompleted,omitempty"`
	MeasuredToCompletedSec float64            `json:"measuredToCompletedSec,omitempty"`
	// Machine is what all the machine's CPUs did from T0 until the DONE stream held every
	// completion, whatever ran on them; nil where /proc/stat cannot be read.
	Machine                *Machine `json:"machine,omitempty"`
	LeadSec                float64  `json:"leadSec"`
	SchedulingSec          float64  `json:"schedulingSec"`
	ScheduledBeforeT0Sec   float64  `json:"scheduledBeforeT0Sec"`
	FirstFiredAfterT0Sec   float64  `json:"firstFiredAfterT0Sec"`
	LastFiredAfterT0Sec    float64  `json:"lastFiredAfterT0Sec"`
	AllCompletedAfterT0Sec float64  `json:"allCompletedAfterT0Sec"`
	// AppliedAfterT0Sec: when the schedulers had applied every completion (their consumer of the
	// DONE stream had nothing pending or unacked); the CPU figures run to it.
	AppliedAfterT0Sec float64 `json:"appliedAfterT0Sec,omitempty"`
	// Bursts: how many completions the schedulers applied before the last fire was made, and
	// when they applied the first (observer.readApplied): completions applied while fires are still
	// being made take the cores and partition locks those fires need.
	AppliedBeforeLastFire  int     `json:"appliedBeforeLastFire,omitempty"`
	FirstAppliedAfterT0Sec float64 `json:"firstAppliedAfterT0Sec,omitempty"`
	TimedOut               bool    `json:"timedOut"`
	// Windows: start lateness per window of scheduled time (a third of the run), to see a
	// growing backlog.
	Windows   []Window `json:"windows,omitempty"`
	WindowSec int      `json:"windowSec,omitempty"`
	// BacklogGrows: the last window's p50 or p99 is more than twice the first's and above
	// 100 ms, or fewer than 90 % of the demanded fires/s got through (backlogGrows).
	BacklogGrows bool      `json:"backlogGrows"`
	Failover     *Failover `json:"failover,omitempty"`
	// AnalyzedBeforeT0 and AnalyzedDuring are the tables autovacuum analyzed while the bench
	// scheduled (and waited for T0) and during the measured interval: the bench never runs
	// ANALYZE, so plans before that are made on the statistics of empty tables.
	AnalyzedBeforeT0 []string `json:"autoanalyzedBeforeT0"`
	AnalyzedDuring   []string `json:"autoanalyzedDuring"`
	Profiles         []string `json:"profiles,omitempty"`
	FiresFile        string   `json:"firesFile,omitempty"` // Config.FiresOut
}

// Lateness is a distribution in milliseconds.
type Lateness struct {
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
}

// Window is the start lateness of the fires scheduled in one window.
type Window struct {
	FromSec int     `json:"fromSec"`
	Fires   int     `json:"fires"`
	P50Ms   float64 `json:"p50Ms"`
	P99Ms   float64 `json:"p99Ms"`
}

// Failover is what killing one scheduler did: GapMs is the worst fire lateness of the fires
// due after the kill, i.e. how long the killed node's triggers waited to be recovered.
type Failover struct {
	Node                  string  `json:"node"`
	KilledAfterT0Sec      float64 `json:"killedAfterT0Sec"`
	GapMs                 float64 `json:"gapMs"`
	RecoveredAfterKillSec float64 `json:"recoveredAfterKillSec"`
	LateOverOneSec        int     `json:"firesLateOverOneSec"`
	FiredByKilledBefore   int     `json:"firedByKilledBeforeKill"`
	FiredByKilledAfter    int     `json:"firedByKilledDueAfterKill"`
}

// Statement is one line of pg_stat_statements over the measured interval. CallsPer is its calls
// per fire (workloads) or per command (intake).
type Statement struct {
	Query    string  `json:"query"`
	Calls    int64   `json:"calls"`
	TotalMs  float64 `json:"totalMs"`
	Rows     int64   `json:"rows"`
	CallsPer float64 `json:"callsPer"`
}

// topStatementsN is how many statements the report lists per workload.
const topStatementsN = 8

// dbStats are the workload database's pg_stat_database counters at one moment.
type dbStats struct {
	at      time.Time
	commits int64
	writes  int64
}

func readDBStats(ctx context.Context, conn *pgx.Conn) (dbStats, error) {
	s := dbStats{at: time.Now()}
	err := conn.QueryRow(ctx, `select xact_commit, tup_inserted + tup_updated + tup_deleted
		from pg_stat_database where datname = current_database()`).Scan(&s.commits, &s.writes)
	if err != nil {
		return s, fmt.Errorf("reading pg_stat_database: %w", err)
	}
	return s, nil
}

// analyzeCounts is how many times autovacuum analyzed each table of the workload database.
func analyzeCounts(ctx context.Context, conn *pgx.Conn) (map[string]int64, error) {
	rows, err := conn.Query(ctx, `select relname, autoanalyze_count + analyze_count from pg_stat_user_tables`)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_user_tables: %w", err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var t string
		var n int64
		if err := rows.Scan(&t, &n); err != nil {
			return nil, fmt.Errorf("reading pg_stat_user_tables: %w", err)
		}
		out[t] = n
	}
	return out, rows.Err()
}

// analyzedBetween lists the tables analyzed between two readings.
func analyzedBetween(before, after map[string]int64) []string {
	out := []string{}
	for t, n := range after {
		if n > before[t] {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// resetStatements empties pg_stat_statements so that it holds the measured interval only.
func (b *bench) resetStatements(ctx context.Context, conn *pgx.Conn) error {
	if !b.inf.statements {
		return nil
	}
	if _, err := conn.Exec(ctx, `select pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("resetting pg_stat_statements: %w", err)
	}
	return nil
}

// topStatements lists the workload database's statements by total execution time, the bench's
// own reads left out, with their calls per unit (fires or commands).
func (b *bench) topStatements(ctx context.Context, conn *pgx.Conn, units int) ([]Statement, error) {
	if !b.inf.statements {
		return nil, nil
	}
	rows, err := conn.Query(ctx, `select query, calls, total_exec_time, rows from pg_stat_statements
		where dbid = (select oid from pg_database where datname = current_database())
		  and query not like '%pg_stat_%'
		order by total_exec_time desc limit $1`, topStatementsN)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var s Statement
		if err := rows.Scan(&s.Query, &s.Calls, &s.TotalMs, &s.Rows); err != nil {
			return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
		}
		s.Query = sqlText(s.Query)
		s.TotalMs = round1(s.TotalMs)
		if units > 0 {
			s.CallsPer = float64(s.Calls) / float64(units)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	return out, nil
}

// sqlText is a statement on one line without its "--" comments (Agate's queries begin with
// them), so that the report shows the SQL.
func sqlText(q string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(q, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line)
		b.WriteByte(' ')
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// cpuDelta is the CPU seconds each process group used between two readings, to the clock tick
// (10 ms) that /proc counts in: a short burst's figures are tenths of a second, which rounding
// to 0.1 s made 0.
func cpuDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		out[k] = math.Round(max(0, v-before[k])*100) / 100
	}
	return out
}

// sumPrefix adds the values whose key begins with prefix.
func sumPrefix(m map[string]float64, prefix string) float64 {
	var t float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			t += v
		}
	}
	return t
}

// percentiles returns p50, p99 and max in milliseconds (nearest rank); zero when d is empty.
func percentiles(d []time.Duration) Lateness {
	if len(d) == 0 {
		return Lateness{}
	}
	slices.Sort(d)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(d)))) - 1
		i = min(max(i, 0), len(d)-1)
		return ms(d[i])
	}
	return Lateness{P50Ms: at(0.50), P99Ms: at(0.99), MaxMs: ms(d[len(d)-1])}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// AppliedPerSec is the expected fires / (T0 → every completion applied by the schedulers): the
// rate with the schedulers' bookkeeping done, 0 when not measured.
func (r Result) AppliedPerSec() float64 {
	if r.AppliedAfterT0Sec <= 0 {
		return 0
	}
	return float64(r.Expected) / r.AppliedAfterT0Sec
}
