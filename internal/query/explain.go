package query

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/pending"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/trigger"
)

// Reason codes of explain (docs/contract.md, "explain").
const (
	ReasonFired          = "fired"
	ReasonCompleted      = "completed"
	ReasonFailed         = "failed"
	ReasonExecuting      = "executing"
	ReasonNoWorker       = "no_worker"
	ReasonFailedNode     = "claimed_by_failed_node"
	ReasonClaimed        = "claimed"
	ReasonPaused         = "paused"
	ReasonBlocked        = "blocked"
	ReasonCalendar       = "calendar_excluded"
	ReasonMisfired       = "misfired"
	ReasonNotAFireTime   = "not_a_fire_time"
	ReasonNotYet         = "not_yet_scheduled"
	ReasonNotDue         = "not_due"
	ReasonEnded          = "ended"
	ReasonError          = "error"
	ReasonDeleted        = "deleted"
	ReasonNoScheduler    = "no_scheduler"
	ReasonNothingLogged  = "not_in_log"
	ReasonWaiting        = "waiting"
	explainEventsLimit   = 500
	explainFiresLimit    = 5000
	explainFiresWindow   = time.Hour // fires and outcomes are looked for this long around a time
	explainOverdueMargin = 5 * time.Second
)

type explain struct {
	Trigger Key        `json:"trigger"`
	At      *time.Time `json:"at"`
}

// Explanation is explain's result: why a trigger fired or did not, at a time or now.
type Explanation struct {
	Trigger      Key        `json:"trigger"`
	At           *time.Time `json:"at,omitempty"`
	State        string     `json:"state,omitempty"` // absent when the trigger no longer exists
	NextFireTime *time.Time `json:"nextFireTime,omitempty"`
	Job          *JobRef    `json:"job,omitempty"`
	Summary      string     `json:"summary"`
	Reasons      []Reason   `json:"reasons"`
}

// Reason is one finding of explain, from the rows or the log.
type Reason struct {
	Code     string     `json:"code"`
	Message  string     `json:"message"`
	Time     *time.Time `json:"time,omitempty"`
	EventID  string     `json:"eventId,omitempty"`
	FireID   string     `json:"fireId,omitempty"`
	Instance string     `json:"instance,omitempty"`
	Calendar string     `json:"calendar,omitempty"`
}

// logged is an event of the log as explain reads it.
type logged struct {
	ID     string
	Type   string
	Source string
	Time   time.Time
	Data   struct {
		Trigger        *Key            `json:"trigger"`
		Job            *Key            `json:"job"`
		FireID         string          `json:"fireId"`
		ScheduledTime  *time.Time      `json:"scheduledTime"`
		FiredTime      *time.Time      `json:"firedTime"`
		FinishedTime   *time.Time      `json:"finishedTime"`
		Worker         string          `json:"worker"`
		Error          json.RawMessage `json:"error"`
		CommandID      string          `json:"commandId"`
		Instruction    string          `json:"instruction"`
		MissedFireTime *time.Time      `json:"missedFireTime"`
		NextFireTime   *time.Time      `json:"nextFireTime"`
		Reason         string          `json:"reason"`
		Nodes          []string        `json:"nodes"`
		Group          string          `json:"group"`
		All            bool            `json:"all"`
	}
}

func (e logged) at() *time.Time { t := e.Time.UTC(); return &t }

// failure is JobFailed's error member.
type failure struct {
	Message     string `json:"message"`
	Final       bool   `json:"final"`
	Interrupted bool   `json:"interrupted"`
}

func scanLogged(r pgx.CollectableRow) (logged, error) {
	var e logged
	var data []byte
	if err := r.Scan(&e.ID, &e.Type, &e.Source, &e.Time, &data); err != nil {
		return e, err
	}
	_ = json.Unmarshal(data, &e.Data) // the log's own events: a member that does not read stays empty
	return e, nil
}

// firedRow is a fired_triggers row of the trigger's job.
type firedRow struct {
	FireID   string
	Trigger  Key
	Instance string
	Fired    time.Time
	State    string
	Alive    bool // its node is a member of the cluster, checking in
}

// explainer gathers what explain reads about one trigger.
type explainer struct {
	h     *Handler
	key   Key
	now   time.Time
	out   Explanation
	exist bool
	// The row, when the trigger exists.
	sched         []byte
	next, prev    *time.Time
	times         int
	calendar      string
	job           JobRef
	nonconcurrent bool
	own           []logged // the trigger's own events, newest first
	end           *logged  // the JobFired of its last fire, which deleted it (loadEnd)
	fired         []firedRow
	firedRead     bool // fired holds the job's fired rows, read once per explain
}

func (x *explainer) add(r Reason) { x.out.Reasons = append(x.out.Reasons, r) }

func (h *Handler) explain(ctx context.Context, req *explain) (any, error) {
	x := &explainer{h: h, key: req.Trigger, now: h.cfg.Now().UTC(), out: Explanation{Trigger: req.Trigger, Reasons: []Reason{}}}
	if req.At != nil {
		at := req.At.UTC()
		x.out.At = &at
	}
	err := store.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		if err := x.load(ctx, tx); err != nil {
			return err
		}
		if req.At != nil {
			return x.explainAt(ctx, tx, *x.out.At)
		}
		return x.explainNow(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	if len(x.out.Reasons) > 0 && x.out.Summary == "" {
		x.out.Summary = x.out.Reasons[0].Message
	}
	return x.out, nil
}

// load reads the trigger's row and its own events; not_found when neither exists.
func (x *explainer) load(ctx context.Context, tx pgx.Tx) error {
	ns, k := x.h.cfg.Namespace, x.key
	var state string
	err := tx.QueryRow(ctx, queries.Get("ExplainTrigger"), ns, k.Group, k.Name).Scan(&state, &x.sched, &x.next, &x.prev,
		&x.times, &x.calendar, &x.job.Group, &x.job.Name, &x.job.Type, &x.nonconcurrent)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("reading trigger %s: %w", k, err)
	default:
		x.exist = true
		x.out.State, x.out.NextFireTime, x.out.Job = state, utc(x.next), &x.job
	}
	rows, _ := tx.Query(ctx, queries.Get("ExplainTriggerEvents"), ns, k.String(), k.Group, k.Name, explainEventsLimit)
	if x.own, err = pgx.CollectRows(rows, scanLogged); err != nil {
		return fmt.Errorf("reading the log of trigger %s: %w", k, err)
	}
	if !x.exist && len(x.own) == 0 {
		return apierr.NotFound("trigger", "trigger %s does not exist and the event log has nothing about it", k)
	}
	if !x.exist {
		// Its job, from its latest scheduling, for its fires.
		for _, e := range x.own {
			if e.Type == events.TypeTriggerScheduled && e.Data.Job != nil {
				x.job = JobRef{Group: e.Data.Job.Group, Name: e.Data.Job.Name}
				break
			}
		}
		return x.loadEnd(ctx)
	}
	return nil
}

// loadEnd reads the fire that deleted the trigger, its last, when there was one.
func (x *explainer) loadEnd(ctx context.Context) error {
	if x.job.Name == "" {
		return nil
	}
	args := []any{x.h.cfg.Namespace, x.job.key().String(), x.key.String(), x.key.Group, x.key.Name}
	err := store.InIndexOrder(ctx, x.h.pool, queries.Get("ExplainTriggerEnd"), args, func(rows pgx.Rows) error {
		end, err := pgx.CollectRows(rows, scanLogged)
		if len(end) > 0 {
			x.end = &end[0]
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("reading the last fire of trigger %s: %w", x.key, err)
	}
	return nil
}

// gone explains a trigger that no longer exists, from its last events; false when it exists.
func (x *explainer) gone() bool {
	if x.exist {
		return false
	}
	if e := x.end; e != nil {
		x.add(Reason{Code: ReasonEnded, Time: e.at(), EventID: e.ID, FireID: e.Data.FireID,
			Message: fmt.Sprintf("it ended at %s: its last fire, fire %s, deleted it, having no fire time left", stamp(e.Time), e.Data.FireID)})
		return true
	}
own:
	for _, e := range x.own {
		switch e.Type {
		case events.TypeTriggerUnscheduled:
			x.add(Reason{Code: ReasonDeleted, Time: e.at(), EventID: e.ID,
				Message: fmt.Sprintf("it was deleted at %s%s", stamp(e.Time), byCommand(e.Data.CommandID))})
			return true
		case events.TypeTriggerCompleted: // logged by a last fire before its JobFired said it alone
			x.add(Reason{Code: ReasonEnded, Time: e.at(), EventID: e.ID,
				Message: fmt.Sprintf("it ended at %s: its last fire deleted it, having no fire time left", stamp(e.Time))})
			return true
		case events.TypeTriggerScheduled:
			break own // what came before is an earlier trigger's of the same key
		}
	}
	x.add(Reason{Code: ReasonDeleted, Message: "it no longer exists (deleted with its job, or replaced)"})
	return true
}

// explainNow explains the trigger's present: its state, why it is not firing, its last fire.
func (x *explainer) explainNow(ctx context.Context, tx pgx.Tx) error {
	if x.gone() {
		x.out.Summary = "It will not fire: " + x.out.Reasons[0].Message + "."
		return x.lastFire(ctx, tx)
	}
	switch x.out.State {
	case store.StatePaused, store.StatePausedBlocked:
		if err := x.paused(ctx, tx, x.now); err != nil {
			return err
		}
		if x.out.State == store.StatePausedBlocked {
			if err := x.blocked(ctx, tx); err != nil {
				return err
			}
		}
	case store.StateBlocked:
		if err := x.blocked(ctx, tx); err != nil {
			return err
		}
	case store.StateError:
		r := Reason{Code: ReasonError, Message: "it is in ERROR: its schedule or calendar can no longer be read; replace it"}
		for _, e := range x.own {
			if e.Type == events.TypeTriggerError {
				r.Time, r.EventID = e.at(), e.ID
				r.Message = fmt.Sprintf("it went to ERROR at %s: %s; replace it to bring it back", stamp(e.Time), e.Data.Reason)
				break
			}
		}
		x.add(r)
	case store.StateComplete:
		x.add(Reason{Code: ReasonEnded, Message: "it has no fire time left; it goes once its last run is over"})
	case store.StateAcquired:
		rows, err := x.firedRows(ctx, tx)
		if err != nil {
			return err
		}
		for _, f := range rows {
			if f.Trigger == x.key && f.State == "ACQUIRED" {
				x.claim(f)
			}
		}
	case store.StateWaiting:
		if err := x.waiting(ctx, tx); err != nil {
			return err
		}
	}
	if x.next != nil && x.out.State != store.StateError && x.out.State != store.StateComplete {
		x.out.Summary = fmt.Sprintf("%s; next fire time %s.", stateSummary(x.out.State), stamp(*x.next))
	}
	return x.lastFire(ctx, tx)
}

func stateSummary(state string) string {
	switch state {
	case store.StatePaused:
		return "Paused: it does not fire until resumed"
	case store.StatePausedBlocked:
		return "Paused, and its job is running"
	case store.StateBlocked:
		return "Blocked: it fires once its non-concurrent job's run is over"
	case store.StateAcquired:
		return "Claimed by a scheduler node, to fire when due"
	}
	return "Waiting"
}

// waiting explains a WAITING trigger: due later, or overdue and why.
func (x *explainer) waiting(ctx context.Context, tx pgx.Tx) error {
	if x.next == nil {
		return nil
	}
	if x.next.After(x.now.Add(-explainOverdueMargin)) {
		x.add(Reason{Code: ReasonNotDue, Time: utc(x.next), Message: fmt.Sprintf("it is due at %s, in %s", stamp(*x.next),
			x.next.Sub(x.now).Round(time.Millisecond))})
		return nil
	}
	var live int
	if err := tx.QueryRow(ctx, queries.Get("ExplainLiveNodes"), x.h.cfg.Namespace).Scan(&live); err != nil {
		return fmt.Errorf("counting scheduler nodes: %w", err)
	}
	if live == 0 {
		x.add(Reason{Code: ReasonNoScheduler, Time: utc(x.next),
			Message: fmt.Sprintf("it was due at %s and no scheduler node is running: start one", stamp(*x.next))})
		return nil
	}
	x.add(Reason{Code: ReasonWaiting, Time: utc(x.next), Message: fmt.Sprintf("it was due at %s, %s ago, and waits for a "+
		"scheduler node to claim it (a node is busy, or the misfire scan will apply its instruction)", stamp(*x.next),
		x.now.Sub(*x.next).Round(time.Millisecond))})
	return nil
}

// paused finds the pause in force at t: the trigger's own, its group's or every group's.
func (x *explainer) paused(ctx context.Context, tx pgx.Tx, t time.Time) error {
	var latest *logged
	for i, e := range x.own {
		if !e.Time.After(t) && (e.Type == events.TypeTriggerPaused || e.Type == events.TypeTriggerResumed) {
			latest = &x.own[i]
			break
		}
	}
	rows, _ := tx.Query(ctx, queries.Get("ExplainGroupEvents"), x.h.cfg.Namespace, x.key.Group)
	group, err := pgx.CollectRows(rows, scanLogged)
	if err != nil {
		return fmt.Errorf("reading the pauses of group %s: %w", x.key.Group, err)
	}
	for i, e := range group {
		if !e.Time.After(t) && (latest == nil || e.Time.After(latest.Time)) {
			latest = &group[i]
			break
		}
	}
	if latest == nil || latest.Type == events.TypeTriggerResumed || latest.Type == events.TypeGroupResumed {
		if x.out.At == nil {
			x.add(Reason{Code: ReasonPaused, Message: "it is paused (the log no longer holds the pause)"})
		}
		return nil
	}
	what := "it was paused"
	switch {
	case latest.Type == events.TypeGroupPaused && latest.Data.All:
		what = "every trigger was paused (pause_all)"
	case latest.Type == events.TypeGroupPaused:
		what = fmt.Sprintf("its group %s was paused (pause_group)", x.key.Group)
	}
	x.add(Reason{Code: ReasonPaused, Time: latest.at(), EventID: latest.ID,
		Message: fmt.Sprintf("%s at %s%s", what, stamp(latest.Time), byCommand(latest.Data.CommandID))})
	return nil
}

// blocked names the runs in progress of the trigger's non-concurrent job.
func (x *explainer) blocked(ctx context.Context, tx pgx.Tx) error {
	rows, err := x.firedRows(ctx, tx)
	if err != nil {
		return err
	}
	for _, f := range rows {
		if f.State != "EXECUTING" {
			continue
		}
		fired := f.Fired.UTC()
		x.add(Reason{Code: ReasonBlocked, Time: &fired, FireID: f.FireID, Instance: f.Instance,
			Message: fmt.Sprintf("its job %s is non-concurrent and is running: fire %s of trigger %s, fired at %s by %s", x.job.key(),
				f.FireID, f.Trigger, stamp(f.Fired), f.Instance)})
		if err := x.running(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// running adds why an execution in flight may not end: its node failed, or no worker takes
// its job type.
func (x *explainer) running(ctx context.Context, f firedRow) error {
	if !f.Alive {
		x.add(Reason{Code: ReasonFailedNode, FireID: f.FireID, Instance: f.Instance,
			Message: fmt.Sprintf("node %s, which fired %s, is no longer checking in; recovery ends or fires its execution again", f.Instance, f.FireID)})
	}
	if x.h.cfg.JetStream == nil || x.job.Type == "" {
		return nil
	}
	c, exists, err := pending.WorkerConsumerOf(ctx, x.h.cfg.JetStream, x.h.cfg.Namespace, x.job.Type)
	if err != nil {
		return err
	}
	switch {
	case !exists:
		x.add(Reason{Code: ReasonNoWorker, FireID: f.FireID,
			Message: fmt.Sprintf("no worker has ever run job type %s: its fires wait in the stream until one starts", x.job.Type)})
	case c.Waiting == 0 && c.InFlight == 0 && c.Pending > 0:
		x.add(Reason{Code: ReasonNoWorker, FireID: f.FireID,
			Message: fmt.Sprintf("no worker is taking fires of job type %s now: %d wait in the stream", x.job.Type, c.Pending)})
	}
	return nil
}

func (x *explainer) claim(f firedRow) {
	if !f.Alive {
		x.add(Reason{Code: ReasonFailedNode, FireID: f.FireID, Instance: f.Instance, Message: fmt.Sprintf(
			"it is claimed by node %s, which is no longer checking in; recovery gives the claim back", f.Instance)})
		return
	}
	x.add(Reason{Code: ReasonClaimed, FireID: f.FireID, Instance: f.Instance,
		Message: fmt.Sprintf("node %s claimed it at %s, to fire when due", f.Instance, stamp(f.Fired))})
}

// firedRows reads the job's fired rows, once per explain (the blocked reasons and the latest
// fire's outcome both need them).
func (x *explainer) firedRows(ctx context.Context, tx pgx.Tx) ([]firedRow, error) {
	if x.firedRead {
		return x.fired, nil
	}
	rows, _ := tx.Query(ctx, queries.Get("ExplainFiredRows"), x.h.cfg.Namespace, x.job.Group, x.job.Name)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (firedRow, error) {
		var f firedRow
		err := r.Scan(&f.FireID, &f.Trigger.Group, &f.Trigger.Name, &f.Instance, &f.Fired, &f.State, &f.Alive)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the executions of job %s: %w", x.job.key(), err)
	}
	x.fired, x.firedRead = out, true
	return out, nil
}

// fires reads the job's fires and outcomes logged in [from, to), newest first.
func (x *explainer) fires(ctx context.Context, tx pgx.Tx, from, to time.Time) ([]logged, error) {
	if x.job.Name == "" {
		return nil, nil
	}
	rows, _ := tx.Query(ctx, queries.Get("ExplainJobFires"), x.h.cfg.Namespace, x.job.key().String(), from, to, explainFiresLimit)
	evs, err := pgx.CollectRows(rows, scanLogged)
	if err != nil {
		return nil, fmt.Errorf("reading the fires of job %s: %w", x.job.key(), err)
	}
	return evs, nil
}

// lastFire adds the trigger's latest fire within the last hour and what became of it.
func (x *explainer) lastFire(ctx context.Context, tx pgx.Tx) error {
	evs, err := x.fires(ctx, tx, x.now.Add(-explainFiresWindow), x.now.Add(time.Minute))
	if err != nil {
		return err
	}
	for _, e := range evs {
		if e.Type == events.TypeJobFired && e.Data.Trigger != nil && *e.Data.Trigger == x.key {
			return x.outcome(ctx, tx, e, evs)
		}
	}
	return nil
}

// outcome adds a fire and what became of it, from evs (the job's events around it).
func (x *explainer) outcome(ctx context.Context, tx pgx.Tx, fired logged, evs []logged) error {
	sched := *fired.Data.ScheduledTime
	x.add(Reason{Code: ReasonFired, Time: fired.at(), EventID: fired.ID, FireID: fired.Data.FireID, Instance: events.InstanceOf(fired.Source),
		Message: fmt.Sprintf("it fired for %s at %s (%s late), fire %s", stamp(sched), stamp(fired.Time),
			fired.Time.Sub(sched).Round(time.Millisecond), fired.Data.FireID)})
	for _, e := range evs { // newest first: the final outcome before any earlier failed attempt
		if e.Data.FireID != fired.Data.FireID {
			continue
		}
		switch e.Type {
		case events.TypeJobCompleted:
			x.add(Reason{Code: ReasonCompleted, Time: e.at(), EventID: e.ID, FireID: e.Data.FireID, Instance: e.Data.Worker,
				Message: fmt.Sprintf("its run completed at %s on worker %s", stamp(e.Time), e.Data.Worker)})
			return nil
		case events.TypeJobFailed:
			var f failure
			_ = json.Unmarshal(e.Data.Error, &f)
			what := "failed; another attempt follows"
			if f.Final {
				what = "failed finally"
			}
			if f.Interrupted {
				what = "was interrupted"
			}
			x.add(Reason{Code: ReasonFailed, Time: e.at(), EventID: e.ID, FireID: e.Data.FireID, Instance: e.Data.Worker,
				Message: fmt.Sprintf("its run %s at %s on worker %s: %s", what, stamp(e.Time), e.Data.Worker, f.Message)})
			return nil
		}
	}
	rows, err := x.firedRows(ctx, tx)
	if err != nil {
		return err
	}
	for _, f := range rows {
		if f.FireID == fired.Data.FireID {
			x.add(Reason{Code: ReasonExecuting, FireID: f.FireID, Instance: f.Instance,
				Message: fmt.Sprintf("its run has no outcome yet: fire %s is in flight", f.FireID)})
			return x.running(ctx, f)
		}
	}
	x.add(Reason{Code: ReasonNothingLogged, FireID: fired.Data.FireID,
		Message: "its outcome is not in the log within an hour of the fire: see the trigger's history"})
	return nil
}

// explainAt explains the trigger at time at: whether a fire was due then, and what happened.
func (x *explainer) explainAt(ctx context.Context, tx pgx.Tx, at time.Time) error {
	// A fire for that time, whatever else happened.
	evs, err := x.fires(ctx, tx, at.Add(-explainFiresWindow), at.Add(explainFiresWindow))
	if err != nil {
		return err
	}
	for _, e := range evs {
		if e.Type == events.TypeJobFired && e.Data.Trigger != nil && *e.Data.Trigger == x.key &&
			e.Data.ScheduledTime != nil && e.Data.ScheduledTime.Equal(at) {
			if err := x.outcome(ctx, tx, e, evs); err != nil {
				return err
			}
			x.out.Summary = fmt.Sprintf("It fired for %s.", stamp(at))
			return nil
		}
	}
	if !x.exist && x.gone() && x.out.Reasons[0].Time != nil && x.out.Reasons[0].Time.Before(at) {
		x.out.Summary = "It did not fire then: " + x.out.Reasons[0].Message + "."
		return nil
	}
	x.out.Reasons = x.out.Reasons[:0]
	if first := x.firstScheduled(); first != nil && first.After(at) {
		x.add(Reason{Code: ReasonNotYet, Time: utc(first), Message: fmt.Sprintf("it was scheduled at %s, after that time", stamp(*first))})
	}
	if err := x.onSchedule(ctx, tx, at); err != nil {
		return err
	}
	if at.After(x.now) {
		r := Reason{Code: ReasonNotDue, Message: fmt.Sprintf("that time is in %s", at.Sub(x.now).Round(time.Second))}
		if x.out.State == store.StatePaused || x.out.State == store.StatePausedBlocked {
			r.Message += "; it is paused now and will not fire then unless resumed"
		}
		x.add(r)
	} else {
		for _, e := range x.own {
			if e.Type == events.TypeTriggerMisfired && e.Data.MissedFireTime != nil && !e.Data.MissedFireTime.After(at) &&
				(e.Data.NextFireTime == nil || e.Data.NextFireTime.After(at)) {
				then := "it will not fire again"
				if e.Data.NextFireTime != nil {
					then = "its next fire time became " + stamp(*e.Data.NextFireTime)
				}
				x.add(Reason{Code: ReasonMisfired, Time: e.at(), EventID: e.ID, Message: fmt.Sprintf(
					"it misfired: due at %s, it was found late at %s and its misfire instruction %s applied: %s",
					stamp(*e.Data.MissedFireTime), stamp(e.Time), cmp.Or(e.Data.Instruction, "smart_policy"), then)})
				break
			}
		}
		if err := x.paused(ctx, tx, at); err != nil {
			return err
		}
		x.busyAt(at, evs)
		x.releasedAfter(at)
	}
	if len(x.out.Reasons) == 0 {
		x.add(Reason{Code: ReasonNothingLogged, Message: "the log holds no fire for that time and no reason why: " +
			"it may be older than the log keeps (--event-retention)"})
	}
	x.out.Summary = fmt.Sprintf("It did not fire for %s: %s.", stamp(at), x.out.Reasons[0].Message)
	return nil
}

// firstScheduled is when the trigger was scheduled first, among the events the log still has.
func (x *explainer) firstScheduled() *time.Time {
	var first *time.Time
	for _, e := range x.own {
		if e.Type == events.TypeTriggerScheduled {
			first = e.at()
		}
	}
	return first
}

// onSchedule says whether at is a fire time of the trigger's schedule, and whether its calendar
// excludes it.
func (x *explainer) onSchedule(ctx context.Context, tx pgx.Tx, at time.Time) error {
	if !x.exist {
		return nil
	}
	t, err := trigger.Restore(x.sched, x.next, x.prev, x.times)
	if err != nil {
		return nil // an ERROR trigger: explainNow says so; a time cannot be checked
	}
	if on := t.ScheduledAtOrAfter(at); !on.Equal(at) {
		msg := "no fire time of its schedule is at or after that time"
		if !on.IsZero() {
			msg = fmt.Sprintf("its schedule has no fire time then; the next one after is %s", stamp(on))
		}
		x.add(Reason{Code: ReasonNotAFireTime, Time: utc(&on), Message: msg})
		return nil
	}
	if x.calendar == "" {
		return nil
	}
	cals, err := store.LoadCalendars(ctx, tx, x.h.cfg.Namespace, []string{x.calendar})
	if err != nil {
		return err
	}
	cal, err := cals.For(x.calendar)
	if err != nil {
		return nil // its calendar is gone or unreadable: explainNow's ERROR says so
	}
	if !cal.IsTimeIncluded(at) {
		x.add(Reason{Code: ReasonCalendar, Calendar: x.calendar,
			Message: fmt.Sprintf("its calendar %s excludes that time", x.calendar)})
	}
	return nil
}

// busyAt adds the runs of the trigger's non-concurrent job that were in progress at t.
func (x *explainer) busyAt(t time.Time, evs []logged) {
	if !x.nonconcurrent {
		return
	}
	ended := map[string]bool{}
	for _, e := range evs { // newest first: outcomes are seen before their fires
		if (e.Type == events.TypeJobCompleted || e.Type == events.TypeJobFailed) && !e.Time.After(t) {
			ended[e.Data.FireID] = true
		}
		if e.Type == events.TypeJobFired && !e.Time.After(t) && !ended[e.Data.FireID] && e.Data.Trigger != nil {
			x.add(Reason{Code: ReasonBlocked, Time: e.at(), EventID: e.ID, FireID: e.Data.FireID, Message: fmt.Sprintf(
				"its job %s is non-concurrent and was running then: fire %s of trigger %s, fired at %s", x.job.key(),
				e.Data.FireID, e.Data.Trigger, stamp(e.Time))})
			return
		}
	}
}

// releasedAfter adds a claim given back after t because its node failed.
func (x *explainer) releasedAfter(t time.Time) {
	for _, e := range slices.Backward(x.own) { // oldest first
		if e.Type == events.TypeTriggerReleased && e.Time.After(t) && e.Data.Reason == events.ReleaseNodeFailed {
			x.add(Reason{Code: ReasonFailedNode, Time: e.at(), EventID: e.ID, Instance: strings.Join(e.Data.Nodes, ","),
				Message: fmt.Sprintf("it was claimed by node %s, which failed; recovery gave the claim back at %s",
					strings.Join(e.Data.Nodes, ", "), stamp(e.Time))})
			return
		}
	}
}

func (j JobRef) key() Key { return Key{Group: j.Group, Name: j.Name} }

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func byCommand(id string) string {
	if id == "" {
		return ""
	}
	return " by command " + id
}
