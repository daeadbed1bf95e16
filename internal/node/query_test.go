package node_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/query"
	"github.com/agatesched/agate/schemas"
)

// replySchemas compiles the reply schemas of the queries (schemas/json/query/*.reply.json),
// keyed by query name, with the event envelope they refer to.
var replySchemas = sync.OnceValues(func() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	files, err := fs.Glob(schemas.JSON, "json/query/*.reply.json")
	if err != nil {
		return nil, err
	}
	for _, f := range append(files, "json/event/envelope.json") {
		raw, err := fs.ReadFile(schemas.JSON, f)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		if err := c.AddResource("https://agate.dev/schemas/"+strings.TrimPrefix(f, "json/"), doc); err != nil {
			return nil, err
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, name := range query.Names() {
		if out[name], err = c.Compile("https://agate.dev/schemas/query/" + name + ".reply.json"); err != nil {
			return nil, err
		}
	}
	return out, nil
})

// reply is a query's reply with its result left to decode.
type reply struct {
	OK     bool            `json:"ok"`
	Query  string          `json:"query"`
	Result json.RawMessage `json:"result"`
	Error  *apierr.Error   `json:"error"`
}

// ask sends a query and returns its reply, after checking it against the query's reply schema
// and the error headers against the body.
func (e *env) ask(t *testing.T, name string, body any) reply {
	t.Helper()
	data, ok := body.([]byte)
	if !ok {
		data = mustJSON(t, body)
	}
	var msg *nats.Msg
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		msg, err = e.nc.Request(events.Subjects(e.ns).API(name), data, 5*time.Second)
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			break // a node still subscribing is not answering yet
		}
	}
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	sch, err := replySchemas()
	if err != nil {
		t.Fatalf("compiling the reply schemas: %v", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(msg.Data))
	if err != nil {
		t.Fatalf("reply to %s is not JSON: %v: %s", name, err, msg.Data)
	}
	if err := sch[name].Validate(inst); err != nil {
		t.Errorf("reply to %s does not match json/query/%s.reply.json: %v\n%s", name, name, err, msg.Data)
	}
	var r reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		t.Fatal(err)
	}
	if code := msg.Header.Get("Nats-Service-Error-Code"); (code != "") != (r.Error != nil) {
		t.Errorf("reply to %s: Nats-Service-Error-Code %q with error %v", name, code, r.Error)
	}
	return r
}

// result decodes an accepted reply's result into v.
func result[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if !r.OK {
		t.Fatalf("%s failed: %+v", r.Query, r.Error)
	}
	if err := json.Unmarshal(r.Result, &v); err != nil {
		t.Fatalf("%s result: %v: %s", r.Query, err, r.Result)
	}
	return v
}

// queryCase is one request of a query's table: it either fails with code on field, or
// succeeds and check looks at the reply.
type queryCase struct {
	name  string
	body  any
	code  string // "" when the query succeeds
	field string
	check func(t *testing.T, r reply)
}

func (e *env) runCases(t *testing.T, query string, cases []queryCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			r := e.ask(t, query, tc.body)
			if tc.code == "" {
				if !r.OK {
					t.Fatalf("failed: %+v", r.Error)
				}
			} else {
				if r.OK || r.Error == nil || r.Error.Code != tc.code || r.Error.Field != tc.field {
					t.Fatalf("answered %s; want %s on field %q", mustJSON(t, r), tc.code, tc.field)
				}
				if r.Query != query || r.Error.Message == "" {
					t.Errorf("error reply without its query or message: %s", mustJSON(t, r))
				}
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// pages follows nextCursor from the first page of a list query, limit items a page, and returns
// the keys of every page.
func pages[T any](t *testing.T, e *env, name string, body map[string]any, limit int, key func(T) string,
	items func(result map[string]json.RawMessage) []T) [][]string {
	t.Helper()
	var out [][]string
	body["limit"] = limit
	for range 100 {
		r := e.ask(t, name, body)
		res := result[map[string]json.RawMessage](t, r)
		var page []string
		for _, it := range items(res) {
			page = append(page, key(it))
		}
		out = append(out, page)
		var next string
		if raw, ok := res["nextCursor"]; ok {
			_ = json.Unmarshal(raw, &next)
		}
		if next == "" {
			return out
		}
		body["cursor"] = next
	}
	t.Fatalf("%s: more than 100 pages", name)
	return nil
}

func field[T any](name string) func(map[string]json.RawMessage) []T {
	return func(res map[string]json.RawMessage) []T {
		var v []T
		_ = json.Unmarshal(res[name], &v)
		return v
	}
}

func triggerKey(tr query.Trigger) string { return tr.Group + "." + tr.Name }
func jobKey(j query.Job) string          { return j.Group + "." + j.Name }

// TestQueries runs every query against a node, table by table: the answer, not found, filters,
// paging across pages and bad requests, each reply checked against its reply schema.
func TestQueries(t *testing.T) {
	e := newEnv(t)
	e.startNode("q1", nil)
	far := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []map[string]any{
		{"id": "cal-1", "name": "holidays", "calendar": map[string]any{"type": "holiday", "dates": []string{"2030-01-02"}}},
		{"id": "cal-2", "name": "weekends", "calendar": map[string]any{"type": "weekly"}},
		{"id": "cal-3", "name": "unused", "calendar": map[string]any{"type": "monthly", "days": []int{1}}},
	} {
		if out := e.request("add_calendar", c); !out.OK {
			t.Fatalf("add_calendar: %+v", out.Error)
		}
	}
	noon := func(group, name, cal string) map[string]any {
		tr := map[string]any{"group": group, "name": name, "startAt": far.Format(time.RFC3339),
			"cron": map[string]any{"expression": "0 0 12 * * ?"}}
		if cal != "" {
			tr["calendar"] = cal
		}
		return tr
	}
	for _, c := range []map[string]any{
		{"id": "j1", "job": job("a", "j1", "noop", map[string]any{"k": "v"}, map[string]any{"timeout": "90s", "description": "first"}),
			"triggers": []any{noon("a", "t1", "holidays"), noon("a", "t2", "")}},
		{"id": "j2", "job": job("a", "j2", "log", nil, nil), "triggers": []any{noon("b", "t3", "")}},
		{"id": "j3", "job": job("a", "j3", "http", nil, map[string]any{"nonconcurrent": true}),
			"triggers": []any{repeating("b", "t4", far, time.Hour, -1)}},
		{"id": "j4", "job": job("b", "j4", "noop", nil, map[string]any{"durable": true})},
		// Two keys whose log aggregate id is the same "x.y.z": their histories must not mix.
		{"id": "j5", "job": job("x.y", "z", "noop", nil, map[string]any{"durable": true})},
		{"id": "j6", "job": job("x", "y.z", "noop", nil, map[string]any{"durable": true})},
		{"id": "run", "job": job("run", "now", "noop", nil, nil), "triggers": []any{oneShot("run", "now", time.Now())}},
	} {
		if out := e.request("schedule_job", c); !out.OK {
			t.Fatalf("schedule_job %s: %+v", c["id"], out.Error)
		}
	}
	for _, id := range []string{"d5", "d6"} {
		k := map[string]any{"x.y": "z", "x": "y.z"}
		g := map[string]string{"d5": "x.y", "d6": "x"}[id]
		if out := e.request("delete_job", map[string]any{"id": id, "job": map[string]any{"group": g, "name": k[g]}}); !out.OK {
			t.Fatalf("delete_job: %+v", out.Error)
		}
	}
	// No worker runs yet, so the fire of run.now stays in flight.
	e.waitCount(10*time.Second, "the fire of run.now", 1, `select count(*) from fired_triggers where sched_name = $1 and state = 'EXECUTING'`, e.ns)

	t.Run("get_job", func(t *testing.T) {
		e.runCases(t, "get_job", []queryCase{
			{name: "job with triggers", body: map[string]any{"job": map[string]any{"group": "a", "name": "j1"}},
				check: func(t *testing.T, r reply) {
					j := result[query.JobDetail](t, r)
					if j.Type != "noop" || j.Timeout != "1m30s" || j.Description != "first" || string(j.Data) != `{"k":"v"}` {
						t.Errorf("job %+v", j)
					}
					if len(j.Triggers) != 2 || j.Triggers[0].Name != "t1" || j.Triggers[1].Name != "t2" ||
						j.Triggers[0].State != "WAITING" || j.Triggers[0].NextFireTime == nil {
						t.Errorf("triggers %+v", j.Triggers)
					}
				}},
			{name: "durable job without triggers", body: map[string]any{"job": map[string]any{"group": "b", "name": "j4"}},
				check: func(t *testing.T, r reply) {
					if j := result[query.JobDetail](t, r); !j.Durable || j.Triggers == nil || len(j.Triggers) != 0 {
						t.Errorf("job %+v", j)
					}
				}},
			{name: "not found", body: map[string]any{"job": map[string]any{"group": "a", "name": "nope"}}, code: "not_found", field: "job"},
			{name: "missing key", body: map[string]any{"job": map[string]any{"group": "a"}}, code: "invalid_argument", field: "job"},
			{name: "unknown field", body: map[string]any{"job": map[string]any{"group": "a", "name": "j1"}, "color": "blue"},
				code: "invalid_argument", check: func(t *testing.T, r reply) {
					if !strings.Contains(r.Error.Message, "color") {
						t.Errorf("message %q does not name the field", r.Error.Message)
					}
				}},
			{name: "not JSON", body: []byte("{"), code: "invalid_argument"},
		})
	})

	t.Run("list_jobs", func(t *testing.T) {
		all := []string{"a.j1", "a.j2", "a.j3", "b.j4", "run.now"}
		e.runCases(t, "list_jobs", []queryCase{
			{name: "empty body is every job", body: []byte(""), check: func(t *testing.T, r reply) {
				got := result[query.JobList](t, r)
				var keys []string
				for _, j := range got.Jobs {
					keys = append(keys, jobKey(j))
					if j.Data != nil {
						t.Errorf("list_jobs shows data of %s", jobKey(j))
					}
				}
				if !slices.Equal(keys, all) || got.NextCursor != "" {
					t.Errorf("jobs %v next %q; want %v", keys, got.NextCursor, all)
				}
			}},
			{name: "by group and type", body: map[string]any{"group": "a", "type": "http"}, check: func(t *testing.T, r reply) {
				if got := result[query.JobList](t, r); len(got.Jobs) != 1 || jobKey(got.Jobs[0]) != "a.j3" || !got.Jobs[0].Nonconcurrent {
					t.Errorf("jobs %+v", got.Jobs)
				}
			}},
			{name: "no match", body: map[string]any{"group": "zzz"}, check: func(t *testing.T, r reply) {
				if got := result[query.JobList](t, r); got.Jobs == nil || len(got.Jobs) != 0 {
					t.Errorf("jobs %+v; want []", got.Jobs)
				}
			}},
			{name: "limit above the maximum", body: map[string]any{"limit": 1001}, code: "invalid_argument", field: "limit"},
			{name: "bad cursor", body: map[string]any{"cursor": "not-a-cursor"}, code: "invalid_argument", field: "cursor"},
		})
		got := pages(t, e, "list_jobs", map[string]any{}, 2, jobKey, field[query.Job]("jobs"))
		if want := [][]string{all[:2], all[2:4], all[4:]}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("pages %v; want %v", got, want)
		}
	})

	t.Run("get_trigger", func(t *testing.T) {
		e.runCases(t, "get_trigger", []queryCase{
			{name: "cron trigger with calendar", body: map[string]any{"trigger": map[string]any{"group": "a", "name": "t1"}},
				check: func(t *testing.T, r reply) {
					tr := result[query.Trigger](t, r)
					if tr.Job != (query.JobRef{Group: "a", Name: "j1", Type: "noop"}) || tr.State != "WAITING" || tr.Cron == nil ||
						tr.Cron.Expression != "0 0 12 * * ?" || tr.Calendar != "holidays" || tr.Misfire != "smart_policy" ||
						tr.Priority != 5 || !tr.StartAt.Equal(far) || tr.NextFireTime == nil || !tr.NextFireTime.Equal(far.Add(12*time.Hour)) ||
						tr.PreviousFireTime != nil || string(tr.Data) != "{}" {
						t.Errorf("trigger %s", mustJSON(t, tr))
					}
				}},
			// Its one fire deleted it (COMPLETE); the execution is in flight (executing, below).
			{name: "fired one-shot", body: map[string]any{"trigger": map[string]any{"group": "run", "name": "now"}}, code: "not_found", field: "trigger"},
			{name: "not found", body: map[string]any{"trigger": map[string]any{"group": "a", "name": "nope"}}, code: "not_found", field: "trigger"},
			{name: "empty name", body: map[string]any{"trigger": map[string]any{"group": "a", "name": ""}}, code: "invalid_argument", field: "trigger.name"},
		})
	})

	t.Run("list_triggers", func(t *testing.T) {
		keys := func(t *testing.T, r reply) []string {
			var out []string
			for _, tr := range result[query.TriggerList](t, r).Triggers {
				out = append(out, triggerKey(tr))
			}
			return out
		}
		want := func(k ...string) func(t *testing.T, r reply) {
			return func(t *testing.T, r reply) {
				if got := keys(t, r); !slices.Equal(got, k) {
					t.Errorf("triggers %v; want %v", got, k)
				}
			}
		}
		e.runCases(t, "list_triggers", []queryCase{
			{name: "all", body: map[string]any{}, check: want("a.t1", "a.t2", "b.t3", "b.t4")},
			{name: "by group", body: map[string]any{"group": "b"}, check: want("b.t3", "b.t4")},
			{name: "by state", body: map[string]any{"state": "BLOCKED"}, check: want()},
			{name: "by job", body: map[string]any{"job": map[string]any{"group": "a", "name": "j1"}}, check: want("a.t1", "a.t2")},
			{name: "by job type", body: map[string]any{"jobType": "http"}, check: want("b.t4")},
			{name: "filters together", body: map[string]any{"group": "b", "jobType": "log", "state": "WAITING"}, check: want("b.t3")},
			{name: "unknown state", body: map[string]any{"state": "SLEEPING"}, code: "invalid_argument", field: "state"},
			{name: "cursor of another query", body: map[string]any{"cursor": encodeCursorLike(t, e, "list_jobs")},
				code: "invalid_argument", field: "cursor"},
		})
		got := pages(t, e, "list_triggers", map[string]any{"group": "a"}, 1, triggerKey, field[query.Trigger]("triggers"))
		if want := [][]string{{"a.t1"}, {"a.t2"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("pages %v; want %v", got, want)
		}
	})

	t.Run("next_fire_times", func(t *testing.T) {
		day := func(d int) time.Time { return time.Date(2030, 1, d, 12, 0, 0, 0, time.UTC) }
		times := func(want ...time.Time) func(t *testing.T, r reply) {
			return func(t *testing.T, r reply) {
				got := result[query.FireTimes](t, r)
				if !slices.EqualFunc(got.FireTimes, want, time.Time.Equal) {
					t.Errorf("fire times %v; want %v", got.FireTimes, want)
				}
			}
		}
		t1 := map[string]any{"group": "a", "name": "t1"}
		e.runCases(t, "next_fire_times", []queryCase{
			{name: "calendar skips a holiday", body: map[string]any{"trigger": t1, "count": 3}, check: times(day(1), day(3), day(4))},
			{name: "after a time", body: map[string]any{"trigger": t1, "count": 2, "after": day(3).Format(time.RFC3339)},
				check: times(day(4), day(5))},
			{name: "default count", body: map[string]any{"trigger": t1}, check: func(t *testing.T, r reply) {
				if got := result[query.FireTimes](t, r); len(got.FireTimes) != query.DefaultCount || got.Calendar != "holidays" || got.State != "WAITING" {
					t.Errorf("result %+v", got)
				}
			}},
			{name: "repeating simple", body: map[string]any{"trigger": map[string]any{"group": "b", "name": "t4"}, "count": 2},
				check: times(far, far.Add(time.Hour))},
			{name: "fired one-shot is gone", body: map[string]any{"trigger": map[string]any{"group": "run", "name": "now"}}, code: "not_found", field: "trigger"},
			{name: "not found", body: map[string]any{"trigger": map[string]any{"group": "a", "name": "nope"}}, code: "not_found", field: "trigger"},
			{name: "count above the maximum", body: map[string]any{"trigger": t1, "count": 101}, code: "invalid_argument", field: "count"},
			{name: "after not a time", body: map[string]any{"trigger": t1, "after": "tomorrow"}, code: "invalid_argument", field: "after"},
		})
		// Computing changed nothing.
		if tr := result[query.Trigger](t, e.ask(t, "get_trigger", map[string]any{"trigger": t1})); !tr.NextFireTime.Equal(day(1)) || tr.TimesTriggered != 0 {
			t.Errorf("next_fire_times moved the trigger: %s", mustJSON(t, tr))
		}
	})

	t.Run("executing", func(t *testing.T) {
		e.runCases(t, "executing", []queryCase{
			{name: "all", body: map[string]any{}, check: func(t *testing.T, r reply) {
				got := result[query.Executions](t, r).Executions
				if len(got) != 1 || got[0].Job != (query.JobRef{Group: "run", Name: "now", Type: "noop"}) ||
					got[0].Trigger != (query.Key{Group: "run", Name: "now"}) || got[0].Instance != "q1" || got[0].FireID == "" {
					t.Errorf("executions %s", mustJSON(t, got))
				}
			}},
			{name: "by job", body: map[string]any{"job": map[string]any{"group": "run", "name": "now"}}, check: func(t *testing.T, r reply) {
				if got := result[query.Executions](t, r).Executions; len(got) != 1 {
					t.Errorf("executions %s", mustJSON(t, got))
				}
			}},
			{name: "other job", body: map[string]any{"job": map[string]any{"group": "a", "name": "j1"}}, check: func(t *testing.T, r reply) {
				if got := result[query.Executions](t, r).Executions; got == nil || len(got) != 0 {
					t.Errorf("executions %s; want []", mustJSON(t, got))
				}
			}},
		})
		// By fire ids: a worker given a batch of fires again asks which still run.
		running := result[query.Executions](t, e.ask(t, "executing", map[string]any{})).Executions[0].FireID
		ended := uuid.NewString()
		count := func(want int) func(t *testing.T, r reply) {
			return func(t *testing.T, r reply) {
				if got := result[query.Executions](t, r).Executions; len(got) != want {
					t.Errorf("executions %s; want %d", mustJSON(t, got), want)
				}
			}
		}
		e.runCases(t, "executing", []queryCase{
			{name: "by fire ids", body: map[string]any{"fireIds": []string{ended, running}}, check: count(1)},
			{name: "by ended fire ids", body: map[string]any{"fireIds": []string{ended}}, check: count(0)},
			{name: "fire ids not uuids", body: map[string]any{"fireIds": []string{"x"}}, code: "invalid_argument", field: "fireIds[0]"},
			{name: "no fire ids", body: map[string]any{"fireIds": []string{}}, code: "invalid_argument", field: "fireIds"},
		})
		// Paging: a second execution, by a copy of the first fired row under another fire id.
		e.exec(`insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name, instance_id,
			fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
			select sched_name, gen_random_uuid(), trigger_group, trigger_name, job_group, job_name, 'q2',
			fired_time + interval '1 second', sched_time, state, nonconcurrent, requests_recovery, priority
			from fired_triggers where sched_name = $1`, e.ns)
		got := pages(t, e, "executing", map[string]any{}, 1, func(x query.Execution) string { return x.Instance },
			field[query.Execution]("executions"))
		if want := [][]string{{"q1"}, {"q2"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("pages %v; want %v", got, want)
		}
		e.exec(`delete from fired_triggers where sched_name = $1 and instance_id = 'q2'`, e.ns)
	})

	t.Run("calendars", func(t *testing.T) {
		e.runCases(t, "get_calendar", []queryCase{
			{name: "used calendar", body: map[string]any{"name": "holidays"}, check: func(t *testing.T, r reply) {
				c := result[query.Calendar](t, r)
				var cal map[string]any
				_ = json.Unmarshal(c.Calendar, &cal)
				if c.Name != "holidays" || c.Triggers == nil || *c.Triggers != 1 || cal["type"] != "holiday" {
					t.Errorf("calendar %s", mustJSON(t, c))
				}
			}},
			{name: "not found", body: map[string]any{"name": "nope"}, code: "not_found", field: "name"},
			{name: "missing name", body: map[string]any{}, code: "invalid_argument"},
		})
		e.runCases(t, "list_calendars", []queryCase{
			{name: "bad limit", body: map[string]any{"limit": 0}, code: "invalid_argument", field: "limit"},
		})
		got := pages(t, e, "list_calendars", map[string]any{}, 2, func(c query.Calendar) string { return c.Name },
			field[query.Calendar]("calendars"))
		if want := [][]string{{"holidays", "unused"}, {"weekends"}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("pages %v; want %v", got, want)
		}
	})

	t.Run("instances", func(t *testing.T) {
		e.runCases(t, "instances", []queryCase{
			{name: "one node", body: []byte(""), check: func(t *testing.T, r reply) {
				got := result[query.Instances](t, r).Instances
				if len(got) != 1 || got[0].InstanceID != "q1" || got[0].CheckinInterval != "1s" || got[0].Epoch == 0 {
					t.Fatalf("instances %s", mustJSON(t, got))
				}
				if since, err := time.ParseDuration(got[0].SinceCheckin); err != nil || since < 0 || since > 10*time.Second {
					t.Errorf("sinceCheckin %q", got[0].SinceCheckin)
				}
			}},
			{name: "no fields", body: map[string]any{"all": true}, code: "invalid_argument"},
		})
	})

	// A worker completes the fire: the history holds the whole execution.
	e.startWorker("w1", nil, nil)
	e.waitCount(10*time.Second, "the completion of run.now", 1,
		`select count(*) from events where sched_name = $1 and type = 'agate.job.completed'`, e.ns)

	t.Run("history", func(t *testing.T) {
		types := func(want ...string) func(t *testing.T, r reply) {
			return func(t *testing.T, r reply) {
				var got []string
				for _, ev := range result[query.History](t, r).Events {
					got = append(got, ev.Type)
				}
				if !slices.Equal(got, want) {
					t.Errorf("events %v; want %v", got, want)
				}
			}
		}
		runNow := map[string]any{"group": "run", "name": "now"}
		e.runCases(t, "history", []queryCase{
			{name: "job", body: map[string]any{"job": runNow},
				check: types(events.TypeJobDeleted, events.TypeJobCompleted, events.TypeJobFired, events.TypeJobAdded)},
			{name: "trigger with its fires", body: map[string]any{"trigger": runNow},
				check: types(events.TypeJobCompleted, events.TypeJobFired, events.TypeTriggerScheduled)},
			{name: "keys sharing an aggregate id", body: map[string]any{"job": map[string]any{"group": "x.y", "name": "z"}},
				check: func(t *testing.T, r reply) {
					evs := result[query.History](t, r).Events
					if len(evs) != 2 || evs[0].Type != events.TypeJobDeleted || evs[1].Type != events.TypeJobAdded ||
						!strings.Contains(string(evs[0].Data), `"x.y"`) {
						t.Errorf("events %s", mustJSON(t, evs))
					}
				}},
			{name: "trigger without fires", body: map[string]any{"trigger": map[string]any{"group": "a", "name": "t2"}},
				check: types(events.TypeTriggerScheduled)},
			{name: "not found", body: map[string]any{"job": map[string]any{"group": "a", "name": "nope"}}, code: "not_found", field: "job"},
			{name: "job and trigger", body: map[string]any{"job": runNow, "trigger": runNow}, code: "invalid_argument"},
			{name: "neither", body: map[string]any{}, code: "invalid_argument"},
			{name: "limit above the maximum", body: map[string]any{"job": runNow, "limit": 201}, code: "invalid_argument", field: "limit"},
		})
		got := pages(t, e, "history", map[string]any{"trigger": runNow}, 2, func(ev events.Envelope) string { return ev.Type },
			field[events.Envelope]("events"))
		want := [][]string{{events.TypeJobCompleted, events.TypeJobFired}, {events.TypeTriggerScheduled}}
		if !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("pages %v; want %v", got, want)
		}
	})
}

// encodeCursorLike returns a real cursor of another query: the second page's of list_jobs.
func encodeCursorLike(t *testing.T, e *env, name string) string {
	t.Helper()
	got := result[map[string]json.RawMessage](t, e.ask(t, name, map[string]any{"limit": 1}))
	var c string
	if err := json.Unmarshal(got["nextCursor"], &c); err != nil || c == "" {
		t.Fatalf("%s returned no cursor: %s", name, mustJSON(t, got))
	}
	return c
}

// exec runs a statement on the test's database.
func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(e.t.Context(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}
