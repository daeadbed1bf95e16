package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/trigger"
)

// bulkCandidate reports whether bulkSchedule may take the command, from the command alone: a
// schedule_job without replace or expectedVersion, of a concurrent job that does not persist its
// data, with triggers and no calendar (whose rows another transaction may change). Such a
// command only inserts rows, when its keys are new: the gatherer batches such commands together
// (keyNewJobs), under Locks.NewJobs instead of their jobs' partitions.
func bulkCandidate(it *item) (*ScheduleJob, bool) {
	if !it.applies() {
		return nil, false
	}
	c, ok := it.cmdv.value.(*ScheduleJob)
	if !ok || c.Replace || c.Job.Nonconcurrent || c.Job.PersistData || c.ExpectedVersion != nil || len(c.Triggers) == 0 {
		return nil, false
	}
	for _, ts := range c.Triggers {
		if ts.Calendar != nil && *ts.Calendar != "" {
			return nil, false
		}
	}
	return c, true
}

// bulkSchedule applies, in one statement instead of a savepoint and six statements each, the
// schedule_job commands at the head of a batch that create a new job with new triggers: the
// common case of a producer scheduling work. It must give exactly what applying them one by
// one would, so it takes only commands whose outcome cannot depend on the others:
//
//   - the batch's leading commands, skipping rejections that write no row: the first command
//     that is not a bulkCandidate ends the run, and everything from there goes the general
//     way, in order;
//   - bulk candidates, while no group is paused (groupsPaused: the caller holds Locks.NewJobs
//     or every partition), whose checks pass, whose job and trigger keys appear once in the run
//     and exist neither in the database — a command whose keys exist is rejected by the general
//     way, as it would be.
//
// It returns the items it applied (or found raced); the others are left to the general way.
// When the statement fails for another reason than a lost connection (a key inserted meanwhile
// by another transaction), nothing of it stays and every item is left to the general way.
func (h *Handler) bulkSchedule(ctx context.Context, tx *outbox.Tx, todo []*item, groupsPaused bool) (map[*item]bool, error) {
	if groupsPaused {
		// A paused group makes a new trigger start PAUSED (and records its group): the general
		// way decides that.
		return nil, nil
	}
	var cands []bulkCand
	jobs, trigs := map[events.Key]bool{}, map[events.Key]bool{}
run:
	for _, it := range todo {
		if !it.applies() {
			continue // a rejection: it writes no row the others read
		}
		c, ok := bulkCandidate(it)
		if !ok {
			break
		}
		a := h.applyCtx(it, tx)
		tmo, err := a.checkJob(c.Job)
		if err != nil {
			continue // rejected the general way, before any write
		}
		keys := []events.Key{{Group: c.Job.Group, Name: c.Job.Name}}
		t, err := a.newTriggers(ctx, c.Triggers) // no calendar: no database read
		if err != nil {
			continue
		}
		if jobs[keys[0]] {
			break
		}
		for _, ts := range c.Triggers {
			if trigs[events.Key{Group: ts.Group, Name: ts.Name}] {
				break run
			}
		}
		jobs[keys[0]] = true
		for _, ts := range c.Triggers {
			trigs[events.Key{Group: ts.Group, Name: ts.Name}] = true
		}
		cands = append(cands, bulkCand{it: it, c: c, a: a, tmo: tmo, trigs: t})
	}
	if len(cands) < 2 {
		return nil, nil // one command gains nothing
	}

	// Keys are new in the common case (a producer scheduling work), so the statement is first
	// tried without looking them up; a key that exists fails it, and only then are the keys
	// read and the statement tried once more without the commands they reject. Looking every
	// key up first cost a statement per batch and a tenth of PostgreSQL's time (measured on
	// the intake benchmark, docs/performance-history.md).
	done, err := h.bulkInsert(ctx, tx, cands, nil)
	if isUniqueViolation(err) {
		var exists map[string]map[events.Key]bool
		if exists, err = h.existingKeys(ctx, tx, jobs, trigs); err != nil {
			return nil, err
		}
		done, err = h.bulkInsert(ctx, tx, cands, exists)
	}
	switch {
	case err == nil:
		return done, nil
	case store.IsTransient(err) || ctx.Err() != nil:
		return nil, err
	}
	h.cfg.Logger.DebugContext(ctx, "bulk schedule_job failed; applying the commands one by one", "error", err)
	return nil, nil
}

// bulkCand is a command bulkSchedule takes, checked and with its triggers computed.
type bulkCand struct {
	it    *item
	c     *ScheduleJob
	a     *applyCtx
	tmo   *int64
	trigs []*trigger.Trigger
}

// bulkInsert stores, in a savepoint, the candidates whose job and trigger keys are not in
// exists (nil: none is known to exist), and appends their events. It returns the items it
// applied or found raced. When it fails, nothing of it stays and no item keeps an outcome.
func (h *Handler) bulkInsert(ctx context.Context, tx *outbox.Tx, cands []bulkCand, exists map[string]map[events.Key]bool) (map[*item]bool, error) {
	var seenIDs, outcomes []string
	var j jobColumns
	var t triggerColumns
	type accepted struct {
		cand bulkCand
		out  Outcome
		enc  json.RawMessage // out, encoded
		rows []triggerRow
	}
	var acc []accepted
	// In the order of the command ids, so that commands_seen's rows are inserted in ascending
	// order. Two nodes can get the same commands in different orders (redelivered after NATS
	// restarted): each then waited at the first id the other had remembered while holding one
	// the other waited for, and PostgreSQL found 25 such deadlocks in a 20-minute make chaos
	// run, each a batch of commands to do again. Commands that go in bulk touch different keys,
	// so their order changes nothing else.
	cands = slices.SortedStableFunc(slices.Values(cands), func(a, b bulkCand) int { return strings.Compare(a.it.id, b.it.id) })
	for _, cd := range cands {
		if exists["job"][events.Key{Group: cd.c.Job.Group, Name: cd.c.Job.Name}] || anyTrigger(exists["trigger"], cd.c.Triggers) {
			continue // already_exists: the general way says so
		}
		rows := make([]triggerRow, len(cd.c.Triggers))
		result := make([]ScheduledTrigger, len(rows))
		for i, ts := range cd.c.Triggers {
			var err error
			if rows[i], err = cd.a.triggerRow(jobOf(cd.c.Job).JobRef, ts, cd.trigs[i], store.StateWaiting); err != nil {
				return nil, err
			}
			result[i] = rows[i].scheduled()
			t.add(cd.it.id, rows[i])
		}
		out := Outcome{OK: true, CommandID: cd.it.id, Command: cd.it.cmd, Result: map[string]any{"triggers": result}}
		enc, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("encoding outcome: %w", err)
		}
		seenIDs, outcomes = append(seenIDs, cd.it.id), append(outcomes, string(enc))
		j.add(cd.it.id, cd.c.Job, cd.tmo)
		acc = append(acc, accepted{cand: cd, out: out, enc: enc, rows: rows})
	}
	if len(acc) == 0 {
		return nil, nil
	}

	done := map[*item]bool{}
	err := tx.Savepoint(ctx, func(sp *outbox.Tx) error {
		args := append([]any{h.cfg.Namespace, seenIDs, outcomes}, j.args()...)
		remembered, err := store.CollectGeneric(ctx, sp, pgx.RowTo[string], queries.Get("BulkSchedule"), append(args, t.args()...)...)
		if err != nil {
			return fmt.Errorf("storing %d scheduled jobs: %w", len(acc), err)
		}
		ok := make(map[string]bool, len(remembered))
		for _, id := range remembered {
			ok[id] = true
		}
		for _, x := range acc {
			it, a := x.cand.it, x.cand.a
			done[it] = true
			if !ok[it.id] {
				it.raced = true // another transaction remembered the id: its rows were not stored
				continue
			}
			a.tx = sp
			if err := a.jobAdded(x.cand.c.Job, false); err != nil {
				return err
			}
			for _, r := range x.rows {
				if err := a.triggerScheduled(jobOf(x.cand.c.Job).JobRef, r); err != nil {
					return err
				}
			}
			if err := a.event(events.TypeCommandAccepted, events.AggregateCommand, it.id, "command", x.enc); err != nil {
				return err
			}
			it.out, it.due = x.out, a.due
		}
		return nil
	})
	if err != nil {
		for _, x := range acc {
			x.cand.it.out, x.cand.it.raced, x.cand.it.due = Outcome{}, false, time.Time{}
		}
		return nil, err
	}
	return done, nil
}

// isUniqueViolation reports a statement that failed on a key that exists.
func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

func anyTrigger(exists map[events.Key]bool, specs []TriggerSpec) bool {
	for _, ts := range specs {
		if exists[events.Key{Group: ts.Group, Name: ts.Name}] {
			return true
		}
	}
	return false
}

// existingKeys says which of the jobs and triggers exist, by kind ("job", "trigger").
func (h *Handler) existingKeys(ctx context.Context, tx pgx.Tx, jobs, trigs map[events.Key]bool) (map[string]map[events.Key]bool, error) {
	var jg, jn, tg, tn []string
	for k := range jobs {
		jg, jn = append(jg, k.Group), append(jn, k.Name)
	}
	for k := range trigs {
		tg, tn = append(tg, k.Group), append(tn, k.Name)
	}
	rows, err := tx.Query(ctx, queries.Get("ExistingKeys"), h.cfg.Namespace, jg, jn, tg, tn)
	if err != nil {
		return nil, fmt.Errorf("reading existing jobs and triggers: %w", err)
	}
	defer rows.Close()
	out := map[string]map[events.Key]bool{"job": {}, "trigger": {}}
	for rows.Next() {
		var kind string
		var k events.Key
		if err := rows.Scan(&kind, &k.Group, &k.Name); err != nil {
			return nil, fmt.Errorf("reading existing jobs and triggers: %w", err)
		}
		out[kind][k] = true
	}
	return out, rows.Err()
}

// jobColumns are BulkSchedule's job parameters, a column each.
type jobColumns struct {
	cid, group, name, typ, desc []string
	durable, noncon, recovery   []bool
	timeout                     []*int64
	data                        []string
}

func (c *jobColumns) add(cid string, job JobSpec, timeoutMilli *int64) {
	c.cid, c.group, c.name, c.typ, c.desc = append(c.cid, cid), append(c.group, job.Group), append(c.name, job.Name),
		append(c.typ, job.Type), append(c.desc, job.Description)
	c.durable, c.noncon, c.recovery = append(c.durable, job.Durable), append(c.noncon, job.Nonconcurrent),
		append(c.recovery, job.RequestsRecovery)
	c.timeout, c.data = append(c.timeout, timeoutMilli), append(c.data, string(jobData(job)))
}

func (c *jobColumns) args() []any {
	return []any{c.cid, c.group, c.name, c.typ, c.desc, c.durable, c.noncon, c.recovery, c.timeout, c.data}
}

// triggerColumns are BulkSchedule's trigger parameters, a column each.
type triggerColumns struct {
	cid, group, name, jobGroup, jobName, kind, schedule []string
	start                                               []time.Time
	end                                                 []*time.Time
	calendar                                            []*string
	priority                                            []int32
	misfire                                             []string
	next                                                []time.Time
	state                                               []string
	trace                                               []*string
	data                                                []string
	slot                                                []int32
}

func (c *triggerColumns) add(cid string, r triggerRow) {
	c.cid, c.group, c.name, c.jobGroup, c.jobName = append(c.cid, cid), append(c.group, r.Group), append(c.name, r.Name),
		append(c.jobGroup, r.JobGroup), append(c.jobName, r.JobName)
	c.kind, c.schedule, c.start, c.end = append(c.kind, r.Kind), append(c.schedule, string(r.Schedule)),
		append(c.start, r.Start), append(c.end, r.End)
	c.calendar, c.priority, c.misfire, c.next = append(c.calendar, r.Calendar), append(c.priority, int32(r.Priority)),
		append(c.misfire, r.Misfire), append(c.next, r.Next)
	c.state, c.trace, c.data, c.slot = append(c.state, r.State), append(c.trace, r.TraceParent),
		append(c.data, string(r.Data)), append(c.slot, int32(r.Slot))
}

func (c *triggerColumns) args() []any {
	return []any{c.cid, c.group, c.name, c.jobGroup, c.jobName, c.kind, c.schedule, c.start, c.end, c.calendar,
		c.priority, c.misfire, c.next, c.state, c.trace, c.data, c.slot}
}
