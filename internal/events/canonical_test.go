package events

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestCanonicalReadsWhatTheJSONPackageReads checks the canonical reader against the json
// package on events as Agate writes them and on mutations of them: a body the canonical reader
// accepts must decode with the json package to the same envelope, data and data bytes; and
// every body Agate writes with plain strings and UTC times must be accepted, so that the
// comparison is not vacuous.
func TestCanonicalReadsWhatTheJSONPackageReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	for i := range 3000 {
		body, plain := randomBody(t, rng, i%2 == 0)
		if ok := checkCanonical(t, body); plain && !ok {
			t.Fatalf("the canonical reader refused a body Agate writes:\n%s", body)
		} else if ok {
			accepted++
		}
		for range 8 {
			checkCanonical(t, mutate(rng, body))
		}
	}
	t.Logf("%d of 3000 unmutated bodies read by the canonical reader", accepted)
}

// FuzzCanonical is the same check on inputs go test -fuzz FuzzCanonical ./internal/events makes.
func FuzzCanonical(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 20 {
		body, _ := randomBody(f, rng, i%2 == 0)
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkCanonical(t, body) })
}

// checkCanonical decodes body as a JobFired and as a JobResult, by the canonical reader and by
// the json package, fails the test where the first accepted what the second reads differently
// or refuses, and reports whether the canonical reader accepted it.
func checkCanonical(t testing.TB, body []byte) bool {
	t.Helper()
	accepted := false
	for _, pair := range [][2]any{{&JobFired{}, &JobFired{}}, {&JobResult{}, &JobResult{}}} {
		fast, slow := pair[0], pair[1]
		env, raw, ok := decodeCanonical(body, fast)
		if !ok {
			if !reflect.ValueOf(fast).Elem().IsZero() {
				t.Fatalf("the canonical reader refused %q but changed the data: %+v", body, fast)
			}
			continue
		}
		accepted = true
		wire := rawData{src: body, into: slow}
		want, wantRaw, err := decode(body, wire, slow)
		if idErr := checkID(env); idErr != nil {
			if err == nil || err.Error() != idErr.Error() {
				t.Fatalf("%q: the canonical reader's envelope has a bad id (%v), the json package's error is %v", body, idErr, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("the canonical reader accepted %q, which the json package refuses: %v", body, err)
		}
		if !reflect.DeepEqual(env, want.withoutData()) || !reflect.DeepEqual(fast, slow) || !bytes.Equal(raw, wantRaw.raw) {
			t.Fatalf("%q:\ncanonical %+v %+v %s\njson      %+v %+v %s", body, env, fast, raw, want, slow, wantRaw.raw)
		}
	}
	return accepted
}

func (env Envelope) withoutData() Envelope {
	env.Data = nil
	return env
}

// randomBody is the message body of a random JobFired or JobResult as Agate writes it, and
// whether its strings are plain (no escapes) and its times UTC: the canonical layout.
func randomBody(t testing.TB, rng *rand.Rand, fired bool) ([]byte, bool) {
	t.Helper()
	plain := rng.IntN(3) > 0
	str := func(s *string) {
		if plain {
			*s = plainString(rng)
		}
	}
	tm := func(v *time.Time) {
		if plain {
			*v = v.UTC()
		}
	}
	var data any
	typ := TypeJobCompleted
	if fired {
		f := randomFired(rng)
		for _, s := range []*string{&f.Job.Group, &f.Job.Name, &f.Job.Type, &f.Trigger.Group, &f.Trigger.Name, &f.Timeout, &f.TriggerState} {
			str(s)
		}
		for _, v := range []*time.Time{&f.ScheduledTime, &f.FiredTime, f.PreviousFireTime, f.NextFireTime} {
			if v != nil {
				tm(v)
			}
		}
		if plain && bytes.ContainsAny(f.Data, " \\<>&\u2028") {
			f.Data = []byte(`{"k":[1,2.5,null,true,"é"]}`)
		}
		data, typ = f, TypeJobFired
	} else {
		r := randomResult(rng)
		for _, s := range []*string{&r.Job.Group, &r.Job.Name, &r.Job.Type, &r.Trigger.Group, &r.Trigger.Name, &r.Worker, &r.TriggerState} {
			str(s)
		}
		if r.Error != nil {
			str(&r.Error.Message)
		}
		for _, v := range []*time.Time{&r.ScheduledTime, &r.StartedTime, &r.FinishedTime} {
			tm(v)
		}
		if plain && bytes.ContainsAny(r.Data, " \\<>&\u2028") {
			r.Data = []byte(`[{"a":{}}]`)
		}
		data = r
	}
	at := time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9))
	subject := ""
	if rng.IntN(4) > 0 {
		subject = "g.j"
	}
	ev, err := New(typ, Source("ns", plainString(rng)), AggregateJob, subject, "agate.ns.fired.noop", at, data)
	if err != nil {
		return []byte(`{}`), false // a time encoding/json refuses: nothing to read
	}
	ev.Subject = subject
	env := ev.Envelope()
	if rng.IntN(2) == 0 {
		env.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		if rng.IntN(2) == 0 {
			env.TraceState = "k=v"
		}
	}
	body, err := env.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	return body, plain
}

func plainString(rng *rand.Rand) string {
	r := []rune("abz-_.: é😀")
	b := make([]rune, rng.IntN(10))
	for i := range b {
		b[i] = r[rng.IntN(len(r))]
	}
	return string(b)
}

// mutate changes one to three bytes of body: replaced by a byte that matters to JSON or to the
// canonical reader, deleted, or doubled.
func mutate(rng *rand.Rand, body []byte) []byte {
	const significant = "\"\\{}[],:0123456789-.+eEZTtfn ul\x00\x1f\x7f\xff\xc3"
	b := bytes.Clone(body)
	for range 1 + rng.IntN(3) {
		if len(b) == 0 {
			break
		}
		i := rng.IntN(len(b))
		switch rng.IntN(3) {
		case 0:
			b[i] = significant[rng.IntN(len(significant))]
		case 1:
			b = append(b[:i], b[i+1:]...)
		default:
			b = append(b[:i+1], b[i:]...)
		}
	}
	return b
}
