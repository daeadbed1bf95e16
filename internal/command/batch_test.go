package command

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/wake"
)

func newHandler(t *testing.T, f *testenv.Fixture, mod func(*Config)) *Handler {
	t.Helper()
	cfg := Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks}
	if mod != nil {
		mod(&cfg)
	}
	h, err := New(cfg, f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// scheduleBody is a schedule_job of job g.<job> with one one-shot trigger g.<job> due at at.
func scheduleBody(t *testing.T, id, job string, at time.Time) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"id": id, "job": map[string]any{"group": "g", "name": job, "type": "noop"},
		"triggers": []any{map[string]any{"group": "g", "name": job, "startAt": at.UTC().Format(time.RFC3339Nano),
			"simple": map[string]any{"repeatCount": 0}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A batch whose middle command is rejected commits the others; the rejection is recorded in the
// same transaction, and the rejected command leaves no row.
func TestBatchRejectedCommandRollsBackAlone(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	h := newHandler(t, f, nil)
	at := time.Now().Add(time.Hour)
	reqs := []Request{
		{Command: "schedule_job", Body: scheduleBody(t, "c1", "j1", at)},
		{Command: "schedule_job", Body: scheduleBody(t, "c2", "j2", at)},
		// j1 exists by then (the first command of the batch made it): already_exists, after its
		// trigger g.j3 would have been... no: the job check comes first, so nothing of it is written.
		{Command: "schedule_job", Body: []byte(`{"id":"c3","job":{"group":"g","name":"j3","type":"noop"},
			"triggers":[{"group":"g","name":"j1","simple":{"repeatCount":0}}]}`)},
		{Command: "schedule_job", Body: []byte(`{"id":"c4","job":{"group":"g","name":"j4","type":"nope"}}`)},
		{Command: "no_such_command", Body: []byte(`{"id":"c5"}`)},
		{Command: "schedule_job", Body: []byte(`{"id":`)},
		{Command: "schedule_job", Body: scheduleBody(t, "c6", "j6", at)},
	}
	outs := h.HandleBatch(t.Context(), reqs)
	want := []string{"", "", CodeAlreadyExists, CodeInvalidArgument, CodeInvalidArgument, CodeInvalidArgument, ""}
	for i, o := range outs {
		got := ""
		if o.Error != nil {
			got = o.Error.Code
		}
		if got != want[i] || o.OK != (want[i] == "") {
			t.Errorf("command %d: got ok=%v %+v, want %q", i, o.OK, o.Error, want[i])
		}
	}
	// c3 wrote its job row before its trigger was found taken: the savepoint took it back.
	if n := f.Count(t, `select count(*) from job_details where sched_name = $1`); n != 3 {
		t.Errorf("%d jobs stored, want 3 (j1, j2, j6)", n)
	}
	if n := f.Count(t, `select count(*) from triggers where sched_name = $1`); n != 3 {
		t.Errorf("%d triggers stored, want 3", n)
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = $2`, events.TypeTriggerScheduled); n != 3 {
		t.Errorf("%d TriggerScheduled events, want 3 (none of the rejected command)", n)
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = $2`, events.TypeCommandRejected); n != 4 {
		t.Errorf("%d CommandRejected events, want 4", n)
	}
	if n := f.Count(t, `select count(*) from commands_seen where sched_name = $1`); n != 6 {
		t.Errorf("%d outcomes remembered, want 6 (every command with an id)", n)
	}
	if n := f.Count(t, `select count(*) from rejected_bodies where sched_name = $1`); n != 4 {
		t.Errorf("%d rejected bodies kept, want 4", n)
	}
}

// Two messages with the same command id in one batch are applied once; the second is answered
// as the first, whether the first was accepted or rejected, and so is a later batch.
func TestBatchDuplicateIDs(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	h := newHandler(t, f, nil)
	at := time.Now().Add(time.Hour)
	bad := []byte(`{"id":"d2","job":{"group":"g","name":"x","type":"nope"}}`)
	batch := []Request{
		{Command: "schedule_job", Body: scheduleBody(t, "d1", "j1", at)},
		{Command: "schedule_job", Body: bad},
		{Command: "schedule_job", Body: scheduleBody(t, "d1", "other", at)}, // same id, another body
		{Command: "schedule_job", Body: bad},
	}
	for round := range 2 {
		outs := h.HandleBatch(t.Context(), batch)
		if !outs[0].OK || !outs[2].OK || outs[0].CommandID != "d1" || fmt.Sprint(outs[0].Result) != fmt.Sprint(outs[2].Result) {
			t.Errorf("round %d: d1 answered %+v then %+v", round, outs[0], outs[2])
		}
		if outs[1].OK || outs[3].OK || outs[1].Error.Code != CodeInvalidArgument || *outs[1].Error != *outs[3].Error {
			t.Errorf("round %d: d2 answered %+v then %+v", round, outs[1].Error, outs[3].Error)
		}
	}
	if n := f.Count(t, `select count(*) from triggers where sched_name = $1`); n != 1 {
		t.Errorf("%d triggers, want 1", n)
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type like 'agate.command.%'`); n != 2 {
		t.Errorf("%d command events, want 2 (one per id)", n)
	}
}

// A command locks only its job's partition: while another transaction holds a partition, a
// command on a job of another partition completes, and one on a job of the held partition
// waits for it (as does a command that names no job).
func TestCommandLocksOnlyItsJobsPartition(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	h := newHandler(t, f, nil)
	at := time.Now().Add(time.Hour)
	// Two jobs in different partitions.
	held := "held"
	free := ""
	for i := 0; free == ""; i++ {
		if name := fmt.Sprintf("free-%d", i); f.Locks.PartitionOf("g", name) != f.Locks.PartitionOf("g", held) {
			free = name
		}
	}
	tx, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := f.Locks.Partition(t.Context(), tx, f.Locks.PartitionOf("g", held)); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if out := h.Handle(ctx, "schedule_job", scheduleBody(t, "free", free, at)); !out.OK {
		t.Fatalf("command on a job of a free partition: %+v (it waited for the held one?)", out.Error)
	}

	blocked := make(chan Outcome, 2)
	go func() { blocked <- h.Handle(t.Context(), "schedule_job", scheduleBody(t, "held", held, at)) }()
	go func() {
		blocked <- h.Handle(t.Context(), "add_calendar", []byte(`{"id":"cal","name":"c","calendar":{"type":"weekly"}}`))
	}()
	f.WaitLockWaiters(t, 2)
	select {
	case out := <-blocked:
		t.Fatalf("a command went through a held partition: %+v", out)
	default:
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if out := <-blocked; !out.OK {
			t.Errorf("after the lock was released: %+v", out.Error)
		}
	}
}

// Commands that only insert new jobs take no partition: they are stored while another
// transaction holds every partition (fires, completions). They hold the paused-groups row
// shared instead, so a group command, which takes it exclusively, waits for them: a trigger
// is never stored WAITING in a group being paused.
func TestNewJobsTakeNoPartition(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	h := newHandler(t, f, nil)
	at := time.Now().Add(time.Hour)
	tx, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for p := range f.Locks.Count() {
		if err := f.Locks.Partition(t.Context(), tx, p); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var reqs []Request
	for i := range 3 {
		reqs = append(reqs, Request{Command: "schedule_job", Body: scheduleBody(t, fmt.Sprint("new-", i), fmt.Sprint("new-", i), at)})
	}
	for i, out := range h.HandleBatch(ctx, reqs) {
		if !out.OK {
			t.Fatalf("new job %d while every partition is held: %+v (it waited for a partition?)", i, out.Error)
		}
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}

	intake, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = intake.Rollback(context.Background()) }()
	if _, err := f.Locks.NewJobs(t.Context(), intake); err != nil {
		t.Fatal(err)
	}
	paused := make(chan Outcome, 1)
	go func() { paused <- h.Handle(t.Context(), "pause_group", []byte(`{"id":"pause-g","group":"g"}`)) }()
	f.WaitLockWaiters(t, 1)
	select {
	case out := <-paused:
		t.Fatalf("pause_group went through a transaction storing new jobs: %+v", out)
	default:
	}
	if err := intake.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out := <-paused; !out.OK {
		t.Fatalf("pause_group after the new jobs committed: %+v", out.Error)
	}
	// With the group paused, a new job's trigger starts PAUSED (the general way decides it).
	if out := h.HandleBatch(ctx, []Request{
		{Command: "schedule_job", Body: scheduleBody(t, "late-1", "late-1", at)},
		{Command: "schedule_job", Body: scheduleBody(t, "late-2", "late-2", at)},
	}); !out[0].OK || !out[1].OK {
		t.Fatalf("new jobs in a paused group: %+v", out)
	}
	for _, name := range []string{"new-0", "late-1", "late-2"} {
		want := store.StatePaused
		if got := f.State(t, events.Key{Group: "g", Name: name}); got != want {
			t.Errorf("trigger g.%s is %s, want %s", name, got, want)
		}
	}
}

// A batch of new jobs that waits for the paused-groups row while a group is being paused reads
// the paused groups after it got the row: its triggers in that group start PAUSED. (Read in the
// statement that waited, the paused groups came from before the wait: the pause was missed.)
func TestNewJobsSeeGroupPausedWhileTheyWaited(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	h := newHandler(t, f, nil)
	at := time.Now().Add(time.Hour)
	pause, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pause.Rollback(context.Background()) }()
	if err := f.Locks.All(t.Context(), pause); err != nil {
		t.Fatal(err)
	}
	if _, err := pause.Exec(t.Context(), `insert into paused_trigger_grps (sched_name, trigger_group) values ($1, 'g')`, f.Namespace()); err != nil {
		t.Fatal(err)
	}
	outs := make(chan []Outcome, 1)
	go func() {
		outs <- h.HandleBatch(t.Context(), []Request{
			{Command: "schedule_job", Body: scheduleBody(t, "w-1", "w-1", at)},
			{Command: "schedule_job", Body: scheduleBody(t, "w-2", "w-2", at)},
		})
	}()
	f.WaitLockWaiters(t, 1)
	if err := pause.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, out := range <-outs {
		if !out.OK {
			t.Fatalf("new job %d: %+v", i, out.Error)
		}
	}
	for _, name := range []string{"w-1", "w-2"} {
		if got := f.State(t, events.Key{Group: "g", Name: name}); got != store.StatePaused {
			t.Errorf("trigger g.%s is %s, want %s: the group was paused before the batch got the paused-groups row", name, got, store.StatePaused)
		}
	}
}

// A batch of new jobs that repeats commands handled before (a producer's retry) answers them as
// before, logs nothing for them, and stores the others in bulk.
func TestNewJobsBatchWithRepeatedCommands(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	h := newHandler(t, f, nil)
	at := time.Now().Add(time.Hour)
	req := func(id string) Request { return Request{Command: "schedule_job", Body: scheduleBody(t, id, id, at)} }
	first := h.HandleBatch(t.Context(), []Request{req("a"), req("b")})
	for _, out := range first {
		if !out.OK {
			t.Fatalf("first batch: %+v", out.Error)
		}
	}
	outs := h.HandleBatch(t.Context(), []Request{req("a"), req("c"), req("b"), req("d")})
	for i, want := range []Outcome{first[0], {}, first[1], {}} {
		got := outs[i]
		if !got.OK {
			t.Fatalf("command %d: %+v", i, got.Error)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if want.CommandID != "" && string(g) != string(w) {
			t.Errorf("repeated command %d answered %+v, want the first answer %+v", i, got, want)
		}
	}
	if n := f.Count(t, `select count(*) from triggers where sched_name = $1`); n != 4 {
		t.Errorf("%d triggers, want 4", n)
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = 'agate.command.accepted'`); n != 4 {
		t.Errorf("%d CommandAccepted events, want 4 (a repeated command logs nothing)", n)
	}
}

// A batch wakes the acquire loop only when one of its triggers is due before the loop's next
// planned pass.
func TestBatchWakesOnlyForTriggersDueBeforeNextPass(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	w := wake.New()
	h := newHandler(t, f, func(c *Config) { c.Wake = w })
	w.Planned(time.Now().Add(time.Minute))
	if out := h.Handle(t.Context(), "schedule_job", scheduleBody(t, "later", "later", time.Now().Add(time.Hour))); !out.OK {
		t.Fatal(out.Error)
	}
	select {
	case <-w.C():
		t.Fatal("a trigger due in an hour woke the loop planned in a minute")
	default:
	}
	if out := h.Handle(t.Context(), "schedule_job", scheduleBody(t, "soon", "soon", time.Now().Add(time.Second))); !out.OK {
		t.Fatal(out.Error)
	}
	select {
	case <-w.C():
	default:
		t.Fatal("a trigger due in a second did not wake the loop planned in a minute")
	}
}

// The batch transaction takes the union of its commands' partitions.
func TestScopeUnion(t *testing.T) {
	a := scopeOf(&ScheduleJob{Job: JobSpec{Group: "g", Name: "a"}})
	b := scopeOf(&DeleteJob{Job: KeyRef{Group: "g", Name: "b"}})
	if u := a.union(b); u.all || len(u.jobs) != 2 {
		t.Errorf("union of two job scopes: %+v", u)
	}
	if u := a.union(scopeOf(&TriggerRef{})); !u.all {
		t.Errorf("a command without jobs must lock all: %+v", u)
	}
	var none scope
	tx := pgx.Tx(nil)
	if err := none.lock(t.Context(), tx, store.Locks{}); err != nil {
		t.Errorf("an empty scope takes no lock: %v", err)
	}
}

// A batch gives the outcomes, rows and events that applying its commands one by one gives, in
// particular for the schedule_job commands it stores in bulk: new jobs, a job or trigger key
// that exists, a key that appears twice, a replace and a delete after them.
func TestBatchAppliesAsOneByOne(t *testing.T) {
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	body := func(id, job, trig string, extra string) []byte {
		return fmt.Appendf(nil, `{"id":%q,"job":{"group":"g","name":%q,"type":"noop"},"triggers":[{"group":"g","name":%q,"startAt":%q,"simple":{"repeatCount":0}}]%s}`,
			id, job, trig, at.UTC().Format(time.RFC3339), extra)
	}
	pre := []Request{{Command: "schedule_job", Body: body("p1", "old", "old-t", "")}}
	reqs := []Request{
		{Command: "schedule_job", Body: body("b1", "a", "a-t", "")},
		{Command: "schedule_job", Body: []byte(`{"id":"b2"}`)}, // rejected by its schema
		{Command: "schedule_job", Body: body("b3", "b", "b-t", "")},
		{Command: "schedule_job", Body: body("b4", "old", "new-t", "")}, // job exists
		{Command: "schedule_job", Body: body("b5", "c", "old-t", "")},   // trigger exists
		{Command: "schedule_job", Body: body("b6", "d", "a-t", "")},     // trigger of b1
		{Command: "schedule_job", Body: body("b7", "e", "e-t", "")},
		{Command: "schedule_job", Body: body("b8", "a", "a-t2", `,"replace":true`)},
		{Command: "delete_job", Body: []byte(`{"id":"b9","job":{"group":"g","name":"b"}}`)},
		{Command: "schedule_job", Body: body("b10", "b", "b-t", "")},
	}
	type result struct {
		outs   []string
		rows   []string
		events []string
	}
	run := func(batch bool) result {
		f := testenv.NewFixture(t, 8)
		h := newHandler(t, f, func(c *Config) { c.Now = func() time.Time { return at.Add(-time.Hour) } })
		h.HandleBatch(t.Context(), pre)
		var outs []Outcome
		if batch {
			outs = h.HandleBatch(t.Context(), reqs)
		} else {
			for _, r := range reqs {
				outs = append(outs, h.Handle(t.Context(), r.Command, r.Body))
			}
		}
		var res result
		for _, o := range outs {
			b, _ := json.Marshal(o)
			res.outs = append(res.outs, string(b))
		}
		rows, err := f.Pool.Query(t.Context(), `select t.trigger_name || '/' || t.job_name || '/' || t.state || '/' || t.next_fire_time::text || '/' || t.schedule::text || '/' || t.partition || '/' || j.job_type || '/' || j.data::text
			from triggers t join job_details j using (sched_name, job_group, job_name) where t.sched_name = $1 order by 1`, f.Namespace())
		if err != nil {
			t.Fatal(err)
		}
		if res.rows, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		rows, err = f.Pool.Query(t.Context(), `select type || ' ' || aggregate_id || ' ' || (data::jsonb - 'schedule')::text from events where sched_name = $1 order by seq`, f.Namespace())
		if err != nil {
			t.Fatal(err)
		}
		if res.events, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		return res
	}
	one, batch := run(false), run(true)
	for i := range reqs {
		if one.outs[i] != batch.outs[i] {
			t.Errorf("command %d: one by one %s, in a batch %s", i, one.outs[i], batch.outs[i])
		}
	}
	if fmt.Sprint(one.rows) != fmt.Sprint(batch.rows) {
		t.Errorf("rows differ:\none by one %q\nin a batch %q", one.rows, batch.rows)
	}
	// The batch logs the events of the commands it stored in bulk first; each command's events
	// are the same and in the same order.
	sortByCommand := func(evs []string) string {
		per := map[string][]string{}
		for _, e := range evs {
			var k string
			if i := strings.Index(e, `"commandId": "`); i >= 0 {
				k = e[i+14:]
				k = k[:strings.IndexByte(k, '"')]
			}
			per[k] = append(per[k], e)
		}
		return fmt.Sprint(per)
	}
	if sortByCommand(one.events) != sortByCommand(batch.events) {
		t.Errorf("events differ:\none by one %q\nin a batch %q", one.events, batch.events)
	}
}

// Two nodes handed the same new commands in different orders (a redelivery) remember their ids
// in one order, so that neither holds an id the other waits for: no deadlock, and each command
// is answered with the outcome stored first.
func TestBulkRemembersIDsInOrder(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	h := newHandler(t, f, nil)
	at := time.Now().Add(time.Hour)
	req := func(id string) Request { return Request{Command: "schedule_job", Body: scheduleBody(t, id, id, at)} }
	// The other node has remembered "a" and not committed yet; it remembers "b" next.
	other, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(context.Background()) }()
	remember := func(id string) error {
		out, err := json.Marshal(Outcome{OK: true, CommandID: id, Command: "schedule_job"})
		if err != nil {
			return err
		}
		_, err = other.Exec(t.Context(), `insert into commands_seen (sched_name, command_id, outcome) values ($1, $2, $3)`,
			f.Namespace(), id, string(out))
		return err
	}
	if err := remember("a"); err != nil {
		t.Fatal(err)
	}
	outs := make(chan []Outcome, 1)
	go func() { outs <- h.HandleBatch(t.Context(), []Request{req("b"), req("a")}) }()
	f.WaitLockWaiters(t, 1)
	if err := remember("b"); err != nil {
		t.Fatalf("the other node remembering b after a: %v", err)
	}
	if err := other.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, out := range <-outs {
		if !out.OK {
			t.Fatalf("command %d: %+v", i, out.Error)
		}
	}
	if n := f.Count(t, `select count(*) from triggers where sched_name = $1`); n != 0 {
		t.Errorf("%d triggers stored by commands the other node remembered first, want 0", n)
	}
}
