package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/events"
)

// Result is one workload run's figures.
type Result struct {
	Workload    string `json:"workload"`
	Param       string `json:"param"`
	Nodes       int    `json:"nodes"`
	Workers     int    `json:"workers"`
	Concurrency int    `json:"concurrency"`
	Expected    int    `json:"expected"`
	// Demand is the fires/s a steady schedule asks for (0 otherwise).
	Demand float64 `json:"demandPerSec,omitempty"`
	// Completions is the number of JobCompleted events; Completed the distinct expected fires among them.
	Completions int `json:"completions"`
	Completed   int `json:"completed"`
	// Fired is the number of JobFired events.
	Fired int `json:"fired"`
	// FiresPerSec: burst = completions / (last start − T0); others = completions / (last start − first start).
	FiresPerSec float64 `json:"firesPerSec"`
	// E2EPerSec = completions / (all completions seen in the log − T0), River's jobs/s.
	E2EPerSec float64 `json:"e2ePerSec"`
	LateP50Ms float64 `json:"latenessP50Ms"`
	LateP99Ms float64 `json:"latenessP99Ms"`
	LateMaxMs float64 `json:"latenessMaxMs"`
	// FireLag* = JobFired.firedTime − scheduledTime (the scheduler's part); Dispatch* =
	// startedTime − firedTime (publish, JetStream, worker fetch: the bus's part).
	FireLagP50Ms           float64 `json:"fireLagP50Ms"`
	FireLagP99Ms           float64 `json:"fireLagP99Ms"`
	DispatchP50Ms          float64 `json:"dispatchP50Ms"`
	DispatchP99Ms          float64 `json:"dispatchP99Ms"`
	LastFiredAfterT0Sec    float64 `json:"lastFiredAfterT0Sec"`
	FirstStartAfterT0Sec   float64 `json:"firstStartAfterT0Sec"`
	LastStartAfterT0Sec    float64 `json:"lastStartAfterT0Sec"`
	AllCompletedAfterT0Sec float64 `json:"allCompletedAfterT0Sec"`
	// Duplicates: extra JobFired (or JobCompleted) events for one (trigger, scheduled time).
	Duplicates int `json:"duplicates"`
	// Missing: expected (trigger, scheduled time) with no JobCompleted.
	Missing int `json:"missing"`
	// Unexpected: completions for a (trigger, scheduled time) that was not planned.
	Unexpected           int            `json:"unexpected"`
	PerNode              map[string]int `json:"firedPerNode"`
	CommitsPerFire       float64        `json:"commitsPerFire"`
	SchedulingSec        float64        `json:"schedulingSec"`
	ScheduledBeforeT0Sec float64        `json:"scheduledBeforeT0Sec"`
	TimedOut             bool           `json:"timedOut"`
	// Windows: lateness per window of scheduled time (steady; a third of the run), to see a growing backlog.
	Windows   []Window `json:"windows,omitempty"`
	WindowSec int      `json:"windowSec,omitempty"`
	// BacklogGrows: the last window's p99 lateness is more than twice the first's and above
	// 100 ms, or fewer than 90 % of the demanded fires/s got through.
	BacklogGrows bool `json:"backlogGrows"`

	Quartz *Comparison `json:"quartz,omitempty"`
	River  *Comparison `json:"river,omitempty"`
	Target *Comparison `json:"designTarget,omitempty"`
}

// Window is the lateness of the fires scheduled in one 10 s window.
type Window struct {
	FromSec int     `json:"fromSec"`
	Fires   int     `json:"fires"`
	P50Ms   float64 `json:"p50Ms"`
	P99Ms   float64 `json:"p99Ms"`
}

// completion is one JobCompleted event as the measurement needs it.
type completion struct {
	key       string
	fireID    string
	scheduled time.Time
	started   time.Time
	finished  time.Time
}

// measure reads the log of namespace ns and computes the figures against the expected fires.
func measure(ctx context.Context, pool *pgxpool.Pool, ns string, s spec, t0 time.Time,
	expected map[string]time.Time) (Result, error) {
	r := Result{Workload: s.name, Param: s.param, Nodes: s.nodes, Expected: len(expected), PerNode: map[string]int{}}

	rows, err := pool.Query(ctx, `
		select data->>'fireId', data->'trigger'->>'group', data->'trigger'->>'name', (data->>'scheduledTime')::timestamptz,
		       (data->>'startedTime')::timestamptz, (data->>'finishedTime')::timestamptz
		from events where sched_name = $1 and type = $2`, ns, events.TypeJobCompleted)
	if err != nil {
		return r, fmt.Errorf("reading completions: %w", err)
	}
	var comps []completion
	for rows.Next() {
		var g, n string
		var c completion
		if err := rows.Scan(&c.fireID, &g, &n, &c.scheduled, &c.started, &c.finished); err != nil {
			rows.Close()
			return r, fmt.Errorf("reading completions: %w", err)
		}
		c.key = fireKey(g, n, c.scheduled)
		comps = append(comps, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("reading completions: %w", err)
	}

	// Duplicates among fires: the same (trigger, scheduled time) fired more than once.
	var firedDup int
	err = pool.QueryRow(ctx, `
		select coalesce(sum(n - 1), 0), coalesce(sum(n), 0) from (
			select count(*) as n from events where sched_name = $1 and type = $2
			group by data->'trigger'->>'group', data->'trigger'->>'name', (data->>'scheduledTime')::timestamptz) f`,
		ns, events.TypeJobFired).Scan(&firedDup, &r.Fired)
	if err != nil {
		return r, fmt.Errorf("counting duplicate fires: %w", err)
	}
	firedAt := map[string]time.Time{}
	frows, err := pool.Query(ctx, `select data->>'fireId', (data->>'firedTime')::timestamptz
		from events where sched_name = $1 and type = $2`, ns, events.TypeJobFired)
	if err != nil {
		return r, fmt.Errorf("reading fires: %w", err)
	}
	for frows.Next() {
		var id string
		var at time.Time
		if err := frows.Scan(&id, &at); err != nil {
			frows.Close()
			return r, fmt.Errorf("reading fires: %w", err)
		}
		firedAt[id] = at
	}
	frows.Close()
	if err := frows.Err(); err != nil {
		return r, fmt.Errorf("reading fires: %w", err)
	}
	nodeRows, err := pool.Query(ctx, `select source, count(*) from events where sched_name = $1 and type = $2 group by 1`,
		ns, events.TypeJobFired)
	if err != nil {
		return r, fmt.Errorf("counting fires per node: %w", err)
	}
	for nodeRows.Next() {
		var src string
		var n int
		if err := nodeRows.Scan(&src, &n); err != nil {
			nodeRows.Close()
			return r, fmt.Errorf("counting fires per node: %w", err)
		}
		r.PerNode[src[strings.LastIndexByte(src, '/')+1:]] = n
	}
	nodeRows.Close()
	if err := nodeRows.Err(); err != nil {
		return r, fmt.Errorf("counting fires per node: %w", err)
	}

	r.Completions = len(comps)
	seen := map[string]int{}
	var late, fireLag, dispatch []time.Duration
	var firstStart, lastStart, lastFired time.Time
	for _, c := range comps {
		if f, ok := firedAt[c.fireID]; ok {
			fireLag = append(fireLag, f.Sub(c.scheduled))
			dispatch = append(dispatch, c.started.Sub(f))
			if f.After(lastFired) {
				lastFired = f
			}
		}
		seen[c.key]++
		if _, ok := expected[c.key]; !ok {
			r.Unexpected++
		}
		late = append(late, c.started.Sub(c.scheduled))
		if firstStart.IsZero() || c.started.Before(firstStart) {
			firstStart = c.started
		}
		if c.started.After(lastStart) {
			lastStart = c.started
		}
	}
	compDup := 0
	for _, n := range seen {
		compDup += n - 1
	}
	r.Duplicates = max(firedDup, compDup)
	for k := range expected {
		if seen[k] > 0 {
			r.Completed++
		} else {
			r.Missing++
		}
	}
	if len(late) == 0 {
		return r, nil
	}
	r.LateP50Ms, r.LateP99Ms, r.LateMaxMs = percentiles(late)
	if len(fireLag) > 0 {
		r.FireLagP50Ms, r.FireLagP99Ms, _ = percentiles(fireLag)
		r.DispatchP50Ms, r.DispatchP99Ms, _ = percentiles(dispatch)
		r.LastFiredAfterT0Sec = lastFired.Sub(t0).Seconds()
	}
	r.FirstStartAfterT0Sec = firstStart.Sub(t0).Seconds()
	r.LastStartAfterT0Sec = lastStart.Sub(t0).Seconds()
	if s.burst {
		r.FiresPerSec = float64(r.Completions) / lastStart.Sub(t0).Seconds()
	} else if d := lastStart.Sub(firstStart).Seconds(); d > 0 {
		r.FiresPerSec = float64(r.Completions) / d
	}
	if s.demand > 0 {
		win := max(time.Second, (s.lastDue / 3).Truncate(time.Second))
		r.WindowSec = int(win / time.Second)
		r.Windows = windows(comps, t0, win)
		if len(r.Windows) >= 2 {
			first, last := r.Windows[0], r.Windows[len(r.Windows)-1]
			r.BacklogGrows = last.P99Ms > 2*first.P99Ms && last.P99Ms > 100
		}
		if r.FiresPerSec < 0.9*s.demand {
			r.BacklogGrows = true
		}
	}
	return r, nil
}

func windows(comps []completion, t0 time.Time, win time.Duration) []Window {
	by := map[int][]time.Duration{}
	step := int(win / time.Second)
	for _, c := range comps {
		w := int(c.scheduled.Sub(t0)/time.Second) / step * step
		by[w] = append(by[w], c.started.Sub(c.scheduled))
	}
	var out []Window
	for w, l := range by {
		p50, p99, _ := percentiles(l)
		out = append(out, Window{FromSec: w, Fires: len(l), P50Ms: p50, P99Ms: p99})
	}
	slices.SortFunc(out, func(a, b Window) int { return a.FromSec - b.FromSec })
	return out
}

// percentiles returns p50, p99 and max in milliseconds (nearest rank).
func percentiles(d []time.Duration) (p50, p99, maxMs float64) {
	slices.Sort(d)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(d)))) - 1
		i = min(max(i, 0), len(d)-1)
		return ms(d[i])
	}
	return at(0.50), at(0.99), ms(d[len(d)-1])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round1(f float64) float64 { return math.Round(f*10) / 10 }
