package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// FireKey is one scheduled fire of one trigger: "<group>.<name>" and the scheduled time in
// milliseconds since the epoch (triggers are stored to the millisecond).
type FireKey struct {
	Trigger string
	At      int64
}

func keyOf(trigger string, at time.Time) FireKey {
	return FireKey{Trigger: trigger, At: at.UnixMilli()}
}

func (k FireKey) String() string {
	return fmt.Sprintf("%s@%s", k.Trigger, time.UnixMilli(k.At).UTC().Format("15:04:05.000"))
}

// Fire is a JobFired row of the log.
type Fire struct {
	Seq           int64
	FireID        string
	Job           string // "<group>.<name>"
	Trigger       string // "<group>.<name>"
	ScheduledTime time.Time
	Time          time.Time // the event's time (when the node fired it)
	Source        string    // the node's instance id
	Nonconcurrent bool
}

// Execution is a JobCompleted or JobFailed row of the log: one run of a fire by a worker.
type Execution struct {
	Seq          int64
	FireID       string
	Job          string
	Trigger      string
	Worker       string
	Started      time.Time
	Finished     time.Time
	Attempt      int
	Failed       bool
	Final        bool // a JobFailed with error.final
	ScheduledAt  time.Time
	ReceivedTime time.Time // the event's time
}

// terminal reports whether the execution ends its fire: a completion or a final failure.
func (e Execution) terminal() bool { return !e.Failed || e.Final }

// Release is a TriggerReleased row of the log.
type Release struct {
	Time    time.Time
	Trigger string
	Reason  string
	Nodes   []string
}

// Log is what the checker reads from the events table.
type Log struct {
	Fires      []Fire
	Executions []Execution
	Releases   []Release
	// Scheduled maps a trigger ("<group>.<name>") to the command id of its TriggerScheduled.
	Scheduled map[string]string
	Misfires  []string // "<trigger> missed <time>"
	Errors    []string // TriggerError: "<trigger>: <reason>"
}

// PlannedTrigger is a trigger the load producer scheduled, with every fire time it must have.
type PlannedTrigger struct {
	Key       string // "<group>.<name>"
	CommandID string
	Accepted  bool // the producer saw ok: true for its command
	Times     []time.Time
}

// Results are the figures of a run, and the violations of its invariants.
type Results struct {
	Due, Fired int
	Lost       []FireKey
	Doubles    []FireKey // two JobFired (distinct fireIds) for one (trigger, scheduled time)
	Unexpected []FireKey // a JobFired at a time the trigger's schedule does not have
	// Overlaps are pairs of executions of distinct fires of one non-concurrent job that ran at
	// once; each pair as "job: fireA [start, end] / fireB [start, end]".
	Overlaps []string
	// DupOverlaps are overlaps where one side is a duplicate execution (at-least-once): allowed.
	DupOverlaps  int
	NoTerminal   []string // fireIds of JobFired without completion or final failure
	LostCommands []string // commands answered ok whose triggers have no TriggerScheduled
	Misfires     []string
	TriggerErrs  []string
	Executions   int
	Lateness     []time.Duration // of each first fire of an expected (trigger, time), sorted
	// LatenessNonconcurrent is Lateness of the fires of non-concurrent jobs, sorted: their
	// triggers wait, BLOCKED, for the job's execution before (a worker killed in it makes them
	// wait for its redelivery), so their lateness is the load's as much as the scheduler's.
	LatenessNonconcurrent []time.Duration
	LatenessOthers        []time.Duration // Lateness of the other fires, sorted
	Duplicates            []Duplicate
	Failovers             []Failover
	// OrphanExecutions are executions whose fireId no JobFired carries (should never happen).
	OrphanExecutions []string
}

// Duplicate is an execution of a fire beyond its first, and the fault most likely to have
// caused it (the last one injected before it started).
type Duplicate struct {
	FireID  string
	Trigger string
	Worker  string
	Started time.Time
	Fault   *FaultRecord
}

// Failover is the time from a scheduler's death (kill -9 or SIGSTOP) to the first release of
// its claims by another node.
type Failover struct {
	Fault    FaultRecord
	Released bool
	After    time.Duration
}

// Failed reports whether any invariant broke.
func (r *Results) Failed() bool { return len(r.Violations()) > 0 }

// Violations names each broken invariant with its count.
func (r *Results) Violations() []string {
	var v []string
	add := func(n int, what string) {
		if n > 0 {
			v = append(v, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(len(r.Lost), "lost fires")
	add(len(r.Doubles), "double fires of one (trigger, scheduled time)")
	add(len(r.Unexpected), "fires at a time outside the trigger's schedule")
	add(len(r.Overlaps), "overlapping executions of a non-concurrent job")
	add(len(r.NoTerminal), "fires without a terminal event")
	add(len(r.LostCommands), "accepted commands without TriggerScheduled")
	add(len(r.Misfires), "misfires (the threshold should make them impossible)")
	add(len(r.TriggerErrs), "triggers in ERROR")
	add(len(r.OrphanExecutions), "executions of a fireId no JobFired carries")
	return v
}

// Check computes the results of a run from its log, the producer's plan and the injector's
// fault records.
func Check(log Log, plan []PlannedTrigger, faults []FaultRecord) *Results {
	r := &Results{Misfires: log.Misfires, TriggerErrs: log.Errors}

	// Expected fires: every planned trigger the log shows scheduled.
	expected := map[FireKey]bool{}
	planned := map[string]bool{}
	for _, p := range plan {
		planned[p.Key] = true
		if _, ok := log.Scheduled[p.Key]; !ok {
			if p.Accepted {
				r.LostCommands = append(r.LostCommands, p.CommandID+" ("+p.Key+")")
			}
			continue
		}
		for _, t := range p.Times {
			expected[keyOf(p.Key, t)] = true
		}
	}
	r.LostCommands = uniq(r.LostCommands)
	r.Due = len(expected)

	// Fires per (trigger, time), and per fireId.
	byKey := map[FireKey][]Fire{}
	byID := map[string]Fire{}
	for _, f := range log.Fires {
		k := keyOf(f.Trigger, f.ScheduledTime)
		if prev, ok := byID[f.FireID]; ok && keyOf(prev.Trigger, prev.ScheduledTime) == k {
			continue // the same fire logged twice cannot happen (unique id), but is not a second fire
		}
		byID[f.FireID] = f
		byKey[k] = append(byKey[k], f)
	}
	for k, fs := range byKey {
		if len(fs) > 1 {
			r.Doubles = append(r.Doubles, k)
		}
		if !expected[k] && planned[k.Trigger] {
			r.Unexpected = append(r.Unexpected, k)
		}
	}
	for k := range expected {
		if len(byKey[k]) == 0 {
			r.Lost = append(r.Lost, k)
		} else {
			r.Fired++
			f := byKey[k][0]
			r.Lateness = append(r.Lateness, f.Time.Sub(f.ScheduledTime))
			if f.Nonconcurrent {
				r.LatenessNonconcurrent = append(r.LatenessNonconcurrent, f.Time.Sub(f.ScheduledTime))
			} else {
				r.LatenessOthers = append(r.LatenessOthers, f.Time.Sub(f.ScheduledTime))
			}
		}
	}
	slices.Sort(r.Lateness)
	slices.Sort(r.LatenessNonconcurrent)
	slices.Sort(r.LatenessOthers)

	// Executions per fireId, in log order: the first is the one the scheduler took.
	execs := slices.Clone(log.Executions)
	slices.SortFunc(execs, func(a, b Execution) int { return cmp.Compare(a.Seq, b.Seq) })
	r.Executions = len(execs)
	byFire := map[string][]Execution{}
	for _, e := range execs {
		byFire[e.FireID] = append(byFire[e.FireID], e)
	}
	for id, es := range byFire {
		if _, ok := byID[id]; !ok {
			r.OrphanExecutions = append(r.OrphanExecutions, id)
		}
		for _, e := range es[1:] {
			r.Duplicates = append(r.Duplicates, Duplicate{FireID: id, Trigger: e.Trigger, Worker: e.Worker,
				Started: e.Started, Fault: faultBefore(faults, e.Started)})
		}
	}
	for id := range byID {
		if !slices.ContainsFunc(byFire[id], Execution.terminal) {
			r.NoTerminal = append(r.NoTerminal, id)
		}
	}

	// Overlaps of a non-concurrent job's executions of distinct fires.
	type run struct {
		e       Execution
		primary bool
	}
	runs := map[string][]run{}
	for id, es := range byFire {
		f, ok := byID[id]
		if !ok || !f.Nonconcurrent {
			continue
		}
		for i, e := range es {
			runs[f.Job] = append(runs[f.Job], run{e, i == 0})
		}
	}
	for job, rs := range runs {
		slices.SortFunc(rs, func(a, b run) int { return a.e.Started.Compare(b.e.Started) })
		for i := range rs {
			for j := i + 1; j < len(rs) && rs[j].e.Started.Before(rs[i].e.Finished); j++ {
				a, b := rs[i].e, rs[j].e
				if a.FireID == b.FireID {
					continue // two runs of one fire: at-least-once, counted as a duplicate
				}
				if !rs[i].primary || !rs[j].primary {
					r.DupOverlaps++
					continue
				}
				r.Overlaps = append(r.Overlaps, fmt.Sprintf("%s: fire %s [%s, %s] on %s / fire %s [%s, %s] on %s", job,
					a.FireID, clock(a.Started), clock(a.Finished), a.Worker, b.FireID, clock(b.Started), clock(b.Finished), b.Worker))
			}
		}
	}

	// Failover: each kill -9 or SIGSTOP of a scheduler, to the first "node failed" release naming
	// it before the next fault of the same node (a pause shorter than the grace is no death: a
	// release after the same node's later kill belongs to that kill).
	for _, f := range faults {
		if f.Role != roleScheduler || (f.Kind != FaultKill && f.Kind != FaultStop) {
			continue
		}
		var until time.Time
		for _, g := range faults {
			if g.Target == f.Target && g.At.After(f.At) && (until.IsZero() || g.At.Before(until)) {
				until = g.At
			}
		}
		fo := Failover{Fault: f}
		for _, rel := range log.Releases {
			if rel.Reason == "node failed" && slices.Contains(rel.Nodes, f.Target) && !rel.Time.Before(f.At) &&
				(until.IsZero() || rel.Time.Before(until)) {
				if !fo.Released || rel.Time.Sub(f.At) < fo.After {
					fo.Released, fo.After = true, rel.Time.Sub(f.At)
				}
			}
		}
		r.Failovers = append(r.Failovers, fo)
	}

	sortKeys(r.Lost)
	sortKeys(r.Doubles)
	sortKeys(r.Unexpected)
	sort.Strings(r.NoTerminal)
	sort.Strings(r.Overlaps)
	sort.Strings(r.OrphanExecutions)
	slices.SortFunc(r.Duplicates, func(a, b Duplicate) int { return a.Started.Compare(b.Started) })
	return r
}

// faultBefore is the last fault injected at or before t.
func faultBefore(faults []FaultRecord, t time.Time) *FaultRecord {
	var best *FaultRecord
	for i := range faults {
		if !faults[i].At.After(t) && (best == nil || faults[i].At.After(best.At)) {
			best = &faults[i]
		}
	}
	return best
}

func sortKeys(ks []FireKey) {
	slices.SortFunc(ks, func(a, b FireKey) int {
		return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.Trigger, b.Trigger))
	})
}

func uniq(s []string) []string {
	sort.Strings(s)
	return slices.Compact(s)
}

func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
