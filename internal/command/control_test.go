package command

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
)

// now is the clock of the command tests: triggers are scheduled around it.
var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// env is one command test: a handler on its own namespace, at clock now.
type env struct {
	t *testing.T
	f *testenv.Fixture
	h *Handler
	n int // command ids issued
}

func newEnv(t *testing.T) *env {
	f := testenv.NewFixture(t, 4)
	h, err := New(Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, Now: func() time.Time { return now }},
		f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, f: f, h: h}
}

// do sends cmd with body (a JSON object without its id, which do adds) and returns the outcome.
func (e *env) do(cmd, body string) Outcome {
	e.t.Helper()
	e.n++
	id := fmt.Sprintf("c%d", e.n)
	return e.h.Handle(e.t.Context(), cmd, withID(id, body))
}

// withID adds "id" to a JSON object.
func withID(id, body string) []byte {
	rest := strings.TrimSpace(strings.TrimPrefix(body, "{"))
	if rest != "}" {
		rest = "," + rest
	}
	return []byte(`{"id":"` + id + `"` + rest)
}

// must sends a command that must be accepted.
func (e *env) must(cmd, body string) Outcome {
	e.t.Helper()
	out := e.do(cmd, body)
	if !out.OK {
		e.t.Fatalf("%s %s: %+v", cmd, body, out.Error)
	}
	return out
}

// state is a trigger's state ("" when it does not exist) and next fire time.
func (e *env) state(group, name string) (string, *time.Time) {
	e.t.Helper()
	var state string
	var next *time.Time
	_ = e.f.Pool.QueryRow(e.t.Context(), `select state, next_fire_time from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3`,
		e.f.Namespace(), group, name).Scan(&state, &next)
	return state, next
}

func (e *env) wantState(group, name, want string) {
	e.t.Helper()
	if got, _ := e.state(group, name); got != want {
		e.t.Errorf("trigger %s.%s is %q, want %q", group, name, got, want)
	}
}

// wantVersion checks the version of the only row of table in the namespace.
func (e *env) wantVersion(table string, want int64) {
	e.t.Helper()
	var v int64
	if err := e.f.Pool.QueryRow(e.t.Context(), `select version from `+table+` where sched_name = $1`, e.f.Namespace()).Scan(&v); err != nil {
		e.t.Fatal(err)
	}
	if v != want {
		e.t.Errorf("%s at version %d, want %d", table, v, want)
	}
}

// lastSeq is the log's last sequence number.
func (e *env) lastSeq() int64 {
	var seq int64
	_ = e.f.Pool.QueryRow(e.t.Context(), `select coalesce(max(seq), 0) from events where sched_name = $1`, e.f.Namespace()).Scan(&seq)
	return seq
}

// eventsSince lists the types of the events logged after seq, command outcomes left out.
func (e *env) eventsSince(seq int64) []string {
	e.t.Helper()
	rows, err := e.f.Pool.Query(e.t.Context(), `select type from events where sched_name = $1 and seq > $2
		and type not like 'agate.command.%' order by seq`, e.f.Namespace(), seq)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var types []string
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			e.t.Fatal(err)
		}
		types = append(types, typ)
	}
	return types
}

// Job and trigger bodies.
const (
	durableJob = `"job":{"group":"g","name":"j","type":"noop","durable":true}`
	hourly     = `"simple":{"interval":"1h","repeatCount":-1}`
)

func trig(group, name, schedule string) string {
	return fmt.Sprintf(`{"group":%q,"name":%q,%s}`, group, name, schedule)
}

func scheduleJob(job, group string, triggers ...string) string {
	return fmt.Sprintf(`{"job":{"group":"g","name":%q,"type":"noop"},"triggers":[%s]}`, job, strings.Join(triggers, ","))
}

// Each command of the contract, against real PostgreSQL: what it accepts and rejects (code and
// field), the rows it leaves and the events it logs, and that a replay of the same id changes
// nothing and answers the same.
func TestCommands(t *testing.T) {
	future := `"startAt":"2026-11-23T13:00:00Z",` + hourly
	for _, c := range []struct {
		name   string
		setup  func(e *env)
		cmd    string
		body   string
		code   string // "" when accepted
		field  string
		events []string // logged by the command, besides its outcome
		check  func(e *env, out Outcome)
	}{
		{name: "add_job", cmd: "add_job", body: `{` + durableJob + `}`, events: []string{events.TypeJobAdded},
			check: func(e *env, _ Outcome) {
				if n := e.f.Count(e.t, `select count(*) from job_details where sched_name = $1 and durable`); n != 1 {
					e.t.Errorf("%d durable jobs, want 1", n)
				}
			}},
		{name: "add_job non-durable", cmd: "add_job", body: `{"job":{"group":"g","name":"j","type":"noop"}}`,
			code: CodeInvalidArgument, field: "job.durable"},
		{name: "add_job exists", setup: func(e *env) { e.must("add_job", `{`+durableJob+`}`) },
			cmd: "add_job", body: `{` + durableJob + `}`, code: CodeAlreadyExists, field: "job"},
		{name: "add_job replace", setup: func(e *env) { e.must("add_job", `{`+durableJob+`}`) },
			cmd: "add_job", body: `{"job":{"group":"g","name":"j","type":"log","durable":true},"replace":true}`,
			events: []string{events.TypeJobAdded},
			check: func(e *env, _ Outcome) {
				if n := e.f.Count(e.t, `select count(*) from job_details where sched_name = $1 and job_type = 'log'`); n != 1 {
					e.t.Error("the job was not replaced")
				}
			}},
		{name: "add_job unknown type", cmd: "add_job", body: `{"job":{"group":"g","name":"j","type":"nope","durable":true}}`,
			code: CodeInvalidArgument, field: "job.type"},

		{name: "schedule_trigger", setup: func(e *env) { e.must("add_job", `{`+durableJob+`}`) },
			cmd: "schedule_trigger", body: `{"job":{"group":"g","name":"j"},"trigger":` + trig("g", "t", future) + `}`,
			events: []string{events.TypeTriggerScheduled},
			check: func(e *env, out Outcome) {
				e.wantState("g", "t", "WAITING")
				if _, next := e.state("g", "t"); next == nil || !next.Equal(now.Add(time.Hour)) {
					e.t.Errorf("next fire %v, want 13:00", next)
				}
			}},
		{name: "schedule_trigger no job", cmd: "schedule_trigger",
			body: `{"job":{"group":"g","name":"j"},"trigger":` + trig("g", "t", future) + `}`, code: CodeNotFound, field: "job"},
		{name: "schedule_trigger exists", setup: func(e *env) { e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future))) },
			cmd: "schedule_trigger", body: `{"job":{"group":"g","name":"j"},"trigger":` + trig("g", "t", future) + `}`,
			code: CodeAlreadyExists, field: "trigger"},
		{name: "schedule_trigger bad cron", setup: func(e *env) { e.must("add_job", `{`+durableJob+`}`) },
			cmd: "schedule_trigger", body: `{"job":{"group":"g","name":"j"},"trigger":` + trig("g", "t", `"cron":{"expression":"0 0 25 * * ?"}`) + `}`,
			code: CodeInvalidArgument, field: "trigger.cron.expression"},

		{name: "reschedule_trigger to cron", setup: func(e *env) { e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future))) },
			cmd: "reschedule_trigger", body: `{"trigger":{"group":"g","name":"t"},"newTrigger":` + trig("g", "t", `"cron":{"expression":"0 30 * * * ?"}`) + `}`,
			events: []string{events.TypeTriggerScheduled, events.TypeTriggerRescheduled},
			check: func(e *env, _ Outcome) {
				if _, next := e.state("g", "t"); next == nil || !next.Equal(now.Add(30*time.Minute)) {
					e.t.Errorf("next fire %v, want 12:30", next)
				}
				if n := e.f.Count(e.t, `select count(*) from triggers where sched_name = $1 and kind = 'cron'`); n != 1 {
					e.t.Error("the trigger is not a cron trigger now")
				}
			}},
		{name: "reschedule_trigger new key", setup: func(e *env) { e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future))) },
			cmd: "reschedule_trigger", body: `{"trigger":{"group":"g","name":"t"},"newTrigger":` + trig("g", "t2", future) + `}`,
			events: []string{events.TypeTriggerScheduled, events.TypeTriggerRescheduled},
			check: func(e *env, _ Outcome) {
				e.wantState("g", "t", "")
				e.wantState("g", "t2", "WAITING")
				if n := e.f.Count(e.t, `select count(*) from job_details where sched_name = $1`); n != 1 {
					e.t.Error("the job went with its old trigger")
				}
			}},
		{name: "reschedule_trigger onto another trigger", setup: func(e *env) {
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future), trig("g", "u", future)))
		}, cmd: "reschedule_trigger", body: `{"trigger":{"group":"g","name":"t"},"newTrigger":` + trig("g", "u", future) + `}`,
			code: CodeAlreadyExists, field: "newTrigger",
			check: func(e *env, _ Outcome) { e.wantState("g", "t", "WAITING") }}, // nothing half-applied
		{name: "reschedule_trigger missing", cmd: "reschedule_trigger",
			body: `{"trigger":{"group":"g","name":"t"},"newTrigger":` + trig("g", "t", future) + `}`, code: CodeNotFound, field: "trigger"},

		{name: "pause_trigger", setup: func(e *env) { e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future))) },
			cmd: "pause_trigger", body: `{"trigger":{"group":"g","name":"t"}}`, events: []string{events.TypeTriggerPaused},
			check: func(e *env, _ Outcome) { e.wantState("g", "t", "PAUSED") }},
		{name: "pause_trigger blocked", setup: func(e *env) {
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future)))
			e.f.Exec(e.t, `update triggers set state = 'BLOCKED' where sched_name = $1`, e.f.Namespace())
		}, cmd: "pause_trigger", body: `{"trigger":{"group":"g","name":"t"}}`, events: []string{events.TypeTriggerPaused},
			check: func(e *env, _ Outcome) { e.wantState("g", "t", "PAUSED_BLOCKED") }},
		{name: "pause_trigger at its version", setup: func(e *env) { e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future))) },
			cmd: "pause_trigger", body: `{"trigger":{"group":"g","name":"t"},"expectedVersion":1}`, events: []string{events.TypeTriggerPaused},
			check: func(e *env, _ Outcome) { e.wantVersion("triggers", 2) }},
		{name: "pause_trigger stale version", setup: func(e *env) {
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future)))
			e.must("pause_trigger", `{"trigger":{"group":"g","name":"t"}}`)
			e.must("resume_trigger", `{"trigger":{"group":"g","name":"t"}}`)
		}, cmd: "pause_trigger", body: `{"trigger":{"group":"g","name":"t"},"expectedVersion":2}`,
			code: CodeFailedPrecondition, field: "expectedVersion",
			check: func(e *env, _ Outcome) { e.wantState("g", "t", "WAITING"); e.wantVersion("triggers", 3) }},
		{name: "reschedule_trigger keeps counting versions", setup: func(e *env) { e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future))) },
			cmd: "reschedule_trigger", body: `{"trigger":{"group":"g","name":"t"},"expectedVersion":1,"newTrigger":` + trig("g", "t", future) + `}`,
			events: []string{events.TypeTriggerScheduled, events.TypeTriggerRescheduled},
			check:  func(e *env, _ Outcome) { e.wantVersion("triggers", 2) }},
		{name: "add_job replace stale version", setup: func(e *env) {
			e.must("add_job", `{`+durableJob+`}`)
			e.must("add_job", `{`+durableJob+`,"replace":true}`)
		}, cmd: "add_job", body: `{` + durableJob + `,"replace":true,"expectedVersion":1}`, code: CodeFailedPrecondition, field: "expectedVersion",
			check: func(e *env, _ Outcome) { e.wantVersion("job_details", 2) }},
		{name: "delete_job missing at a version", cmd: "delete_job", body: `{"job":{"group":"g","name":"j"},"expectedVersion":1}`,
			code: CodeFailedPrecondition, field: "expectedVersion"},
		{name: "pause_trigger missing", cmd: "pause_trigger", body: `{"trigger":{"group":"g","name":"t"}}`,
			code: CodeNotFound, field: "trigger"},

		{name: "resume_trigger", setup: func(e *env) {
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future)))
			e.must("pause_trigger", `{"trigger":{"group":"g","name":"t"}}`)
		}, cmd: "resume_trigger", body: `{"trigger":{"group":"g","name":"t"}}`, events: []string{events.TypeTriggerResumed},
			check: func(e *env, _ Outcome) { e.wantState("g", "t", "WAITING") }},
		{name: "resume_trigger not paused", setup: func(e *env) { e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future))) },
			cmd: "resume_trigger", body: `{"trigger":{"group":"g","name":"t"}}`,
			check: func(e *env, _ Outcome) { e.wantState("g", "t", "WAITING") }},
		{name: "resume_trigger missing", cmd: "resume_trigger", body: `{"trigger":{"group":"g","name":"t"}}`,
			code: CodeNotFound, field: "trigger"},

		{name: "pause_group", setup: func(e *env) {
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future), trig("other", "t", future)))
		}, cmd: "pause_group", body: `{"group":"g"}`, events: []string{events.TypeGroupPaused},
			check: func(e *env, _ Outcome) {
				e.wantState("g", "t", "PAUSED")
				e.wantState("other", "t", "WAITING")
				// A trigger added to the paused group later starts paused.
				e.must("schedule_job", scheduleJob("j2", "g", trig("g", "later", future)))
				e.wantState("g", "later", "PAUSED")
			}},
		{name: "resume_group", setup: func(e *env) {
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future)))
			e.must("pause_group", `{"group":"g"}`)
			e.must("pause_trigger", `{"trigger":{"group":"g","name":"t"}}`)
		}, cmd: "resume_group", body: `{"group":"g"}`, events: []string{events.TypeTriggerResumed, events.TypeGroupResumed},
			check: func(e *env, _ Outcome) {
				e.wantState("g", "t", "WAITING")
				e.must("schedule_job", scheduleJob("j2", "g", trig("g", "later", future)))
				e.wantState("g", "later", "WAITING")
			}},
		{name: "pause_all", setup: func(e *env) {
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future), trig("other", "t", future)))
		}, cmd: "pause_all", body: `{}`, events: []string{events.TypeGroupPaused},
			check: func(e *env, _ Outcome) {
				e.wantState("g", "t", "PAUSED")
				e.wantState("other", "t", "PAUSED")
				e.must("schedule_job", scheduleJob("j2", "g", trig("new", "t", future)))
				e.wantState("new", "t", "PAUSED")
			}},
		{name: "resume_all", setup: func(e *env) {
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future)))
			e.must("pause_all", `{}`)
			e.must("schedule_job", scheduleJob("j2", "g", trig("new", "t", future)))
			e.must("pause_group", `{"group":"empty"}`)
		}, cmd: "resume_all", body: `{}`, events: []string{events.TypeTriggerResumed, events.TypeTriggerResumed, events.TypeGroupResumed},
			check: func(e *env, _ Outcome) {
				e.wantState("g", "t", "WAITING")
				e.wantState("new", "t", "WAITING")
				// As in Quartz, resume_all resumes the groups that have triggers: a paused group
				// without any stays paused.
				e.must("schedule_job", scheduleJob("j3", "g", trig("empty", "t", future)))
				e.wantState("empty", "t", "PAUSED")
			}},

		{name: "trigger_job", setup: func(e *env) { e.must("add_job", `{`+durableJob+`}`) },
			cmd: "trigger_job", body: `{"job":{"group":"g","name":"j"},"data":{"extra":1}}`, events: []string{events.TypeTriggerScheduled},
			check: func(e *env, out Outcome) {
				var res struct {
					Trigger ScheduledTrigger `json:"trigger"`
				}
				b, _ := json.Marshal(out.Result)
				if err := json.Unmarshal(b, &res); err != nil || res.Trigger.Group != manualGroup || !strings.HasPrefix(res.Trigger.Name, "MT_") {
					e.t.Fatalf("result %s, want a DEFAULT.MT_… trigger", b)
				}
				state, next := e.state(res.Trigger.Group, res.Trigger.Name)
				if state != "WAITING" || next == nil || !next.Equal(now) {
					e.t.Errorf("manual trigger %s at %v, want WAITING at now", state, next)
				}
				if n := e.f.Count(e.t, `select count(*) from triggers where sched_name = $1 and data = '{"extra": 1}'`); n != 1 {
					e.t.Error("the manual trigger does not carry the extra data")
				}
			}},
		{name: "trigger_job nonconcurrent running", setup: func(e *env) {
			e.must("add_job", `{"job":{"group":"g","name":"j","type":"noop","durable":true,"nonconcurrent":true}}`)
			e.f.Exec(e.t, `insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name,
				instance_id, fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
				values ($1, gen_random_uuid(), 'g', 'gone', 'g', 'j', 'n1', now(), now(), 'EXECUTING', true, false, 5)`, e.f.Namespace())
		}, cmd: "trigger_job", body: `{"job":{"group":"g","name":"j"}}`, events: []string{events.TypeTriggerScheduled},
			check: func(e *env, _ Outcome) {
				if n := e.f.Count(e.t, `select count(*) from triggers where sched_name = $1 and state = 'BLOCKED'`); n != 1 {
					e.t.Error("the manual fire of a running non-concurrent job does not wait (BLOCKED)")
				}
			}},
		{name: "trigger_job missing", cmd: "trigger_job", body: `{"job":{"group":"g","name":"j"}}`, code: CodeNotFound, field: "job"},

		{name: "add_calendar replace", setup: func(e *env) {
			e.must("add_calendar", `{"name":"c","calendar":{"type":"daily","start":"09:00","end":"10:00","timeZone":"UTC"}}`)
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", future+`,"calendar":"c"`)))
		}, cmd: "add_calendar", body: `{"name":"c","calendar":{"type":"daily","start":"12:30","end":"14:30","timeZone":"UTC"},"replace":true}`,
			events: []string{events.TypeCalendarAdded, events.TypeTriggerUpdated},
			check: func(e *env, _ Outcome) {
				// Never fired: the first fire after now that the new calendar includes.
				if _, next := e.state("g", "t"); next == nil || !next.Equal(now.Add(3*time.Hour)) {
					e.t.Errorf("next fire %v, want 15:00", next)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if c.setup != nil {
				c.setup(e)
			}
			seq := e.lastSeq()
			body := withID("under-test", c.body)
			out := e.h.Handle(t.Context(), c.cmd, body)
			switch {
			case c.code == "" && !out.OK:
				t.Fatalf("rejected: %+v", out.Error)
			case c.code != "" && (out.OK || out.Error.Code != c.code || out.Error.Field != c.field):
				t.Fatalf("outcome %+v; want %s on field %q", out, c.code, c.field)
			}
			if got := e.eventsSince(seq); !slices.Equal(got, c.events) {
				t.Errorf("logged %v, want %v", got, c.events)
			}
			if c.check != nil {
				c.check(e, out)
			}
			// The same id again: the same answer, and nothing more in the log.
			seq = e.lastSeq()
			again := e.h.Handle(t.Context(), c.cmd, body)
			a, _ := json.Marshal(again)
			b, _ := json.Marshal(out)
			if string(a) != string(b) {
				t.Errorf("replay answered %s, first %s", a, b)
			}
			if n := e.lastSeq() - seq; n != 0 {
				t.Errorf("replay logged %d events", n)
			}
		})
	}
}

// Resuming a trigger whose fire time passed while it was paused applies its misfire instruction
// (Quartz's resumeTrigger), by group too; within the misfire threshold it is simply resumed.
func TestResumeAppliesMisfires(t *testing.T) {
	for _, c := range []struct {
		name, schedule, cmd, body string
		want                      time.Time
	}{
		{"cron smart policy fires once now", `"startAt":"2026-11-23T08:00:00Z","cron":{"expression":"0 0 * * * ?"}`,
			"resume_trigger", `{"trigger":{"group":"g","name":"t"}}`, now},
		{"cron do_nothing waits for the next", `"startAt":"2026-11-23T08:00:00Z","cron":{"expression":"0 0 * * * ?"},"misfire":"do_nothing"`,
			"resume_group", `{"group":"g"}`, now.Add(time.Hour)},
		{"within the threshold", `"startAt":"2026-11-23T11:59:30Z",` + hourly,
			"resume_trigger", `{"trigger":{"group":"g","name":"t"}}`, now.Add(-30 * time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.must("schedule_job", scheduleJob("j", "g", trig("g", "t", c.schedule)))
			e.must("pause_trigger", `{"trigger":{"group":"g","name":"t"}}`)
			seq := e.lastSeq()
			e.must(c.cmd, c.body)
			state, next := e.state("g", "t")
			if state != "WAITING" || next == nil || !next.Equal(c.want) {
				t.Errorf("after %s: %s, next %v; want WAITING at %v", c.cmd, state, next, c.want)
			}
			misfired := slices.Contains(e.eventsSince(seq), events.TypeTriggerMisfired)
			if want := !c.want.Before(now); misfired != want {
				t.Errorf("TriggerMisfired logged: %v, want %v", misfired, want)
			}
		})
	}
}
