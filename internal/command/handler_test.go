package command

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/outbox"
)

// Any byte string sent as any command ends as an applied command or a recorded final rejection:
// never a panic, never an internal or unavailable answer (which would make a durable command
// come round again), never a row changed by a rejected command.
func TestAnyBodyEndsAppliedOrRejected(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	h, err := New(Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks}, f.Pool,
		outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
	if err != nil {
		t.Fatal(err)
	}
	seeds := [][]byte{
		[]byte(`{"id":"s1","job":{"group":"g","name":"j","type":"noop"},"triggers":[{"group":"g","name":"t","simple":{"interval":"1s","repeatCount":-1}}]}`),
		[]byte(`{"id":"s2","job":{"group":"g","name":"j2","type":"noop","durable":true}}`),
		[]byte(`{"id":"s3","job":{"group":"g","name":"j"}}`),
		[]byte(`{"id":"s4","trigger":{"group":"g","name":"t"}}`),
		[]byte(`{"id":"s5","name":"cal","calendar":{"type":"weekly","excludedDays":["SAT","SUN"]}}`),
		[]byte(`{"id":"poison-2"}` + "\x00"),
		[]byte(`{"id":"s6","job":{"group":"g\u0000","name":"x","type":"noop"},"triggers":[]}`),
		[]byte(`{"id":"s7","job":{"group":"g","name":"j7","type":"noop","data":{"key":"value"},"description":"words"},"triggers":[]}`),
		[]byte(`{"id":"s8","job":{"group":"g","name":"j8","type":"noop","durable":true,"data":{"k":"a\u0000b"}}}`),
		[]byte(`{"id":"s9","job":{"group":"g","name":"j"},"trigger":{"group":"g","name":"t2","cron":{"expression":"0 0 * * * ?"}}}`),
		[]byte(`{"id":"s10","trigger":{"group":"g","name":"t"},"newTrigger":{"group":"g","name":"t","simple":{"interval":"1m","repeatCount":3}}}`),
		[]byte(`{"id":"s11","group":"g"}`),
		[]byte(`{"id":"s12"}`),
		[]byte(`{"id":"s13","job":{"group":"g","name":"j2"},"data":{"extra":true}}`),
		[]byte(`{"id":"s14","fireId":"0193a5e8-9bfe-7a00-b111-222233334444"}`),
	}
	commands := append(slices.Clone(known), "no_such_command")
	rng := rand.New(rand.NewPCG(1, 2)) // seeded: a failure replays exactly
	for i := range 2000 {
		body := seeds[i%len(seeds)]
		if i >= 2*len(seeds) { // the seeds as they are first, then mutated
			body = mutate(rng, body)
		}
		cmd := commands[rng.IntN(len(commands))]
		if i < len(seeds) {
			cmd = "schedule_job"
		}
		before := snapshot(t, f)
		out := h.Handle(t.Context(), cmd, body)
		if !out.OK && snapshot(t, f) != before {
			t.Fatalf("case %d: %s %q was rejected (%s) but changed rows", i, cmd, body, out.Error)
		}
		if out.Transient() {
			t.Fatalf("case %d: %s %q answered %s: %s", i, cmd, body, out.Error.Code, out.Error.Message)
		}
		if !out.OK && out.Error.Message == "" {
			t.Fatalf("case %d: %s %q rejected without a message", i, cmd, body)
		}
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = 'agate.command.rejected'`); n == 0 {
		t.Fatal("no rejection was recorded")
	}
}

// snapshot is a digest of every row a command may change.
func snapshot(t *testing.T, f *testenv.Fixture) string {
	t.Helper()
	var sum string
	if err := f.Pool.QueryRow(t.Context(), `select md5(concat(
		(select string_agg(j::text, ',' order by j::text) from job_details j where sched_name = $1),
		(select string_agg(r::text, ',' order by r::text) from triggers r where sched_name = $1),
		(select string_agg(c::text, ',' order by c::text) from calendars c where sched_name = $1),
		(select string_agg(p::text, ',' order by p::text) from paused_trigger_grps p where sched_name = $1)))`,
		f.Namespace()).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	return sum
}

// mutate changes a few bytes of b: flips, inserts (NUL and quotes among them), deletions.
func mutate(rng *rand.Rand, b []byte) []byte {
	out := append([]byte(nil), b...)
	for range 1 + rng.IntN(4) {
		if len(out) == 0 {
			break
		}
		i := rng.IntN(len(out))
		switch rng.IntN(4) {
		case 0:
			out[i] ^= byte(1 << rng.IntN(8))
		case 1:
			ins := []byte{0, '"', '\\', '{', '}', ',', 0xff}[rng.IntN(7)]
			out = append(out[:i], append([]byte{ins}, out[i:]...)...)
		case 2:
			out = append(out[:i], out[i+1:]...)
		case 3:
			out = append(out[:i], append([]byte(`\u0000`), out[i:]...)...)
		}
	}
	return out
}
