package events

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestAppendersAreEncodingJSON checks the hand-written JobFired and JobResult encoders against
// encoding/json on awkward values and on many random ones: the same bytes, and an error where
// encoding/json fails.
func TestAppendersAreEncodingJSON(t *testing.T) {
	awkward := "a\"b\\c\n\r\t\x00\x1f<>&\u2028\u2029é😀\xff\xfe end"
	tr, fa := true, false
	at := time.Date(2026, 11, 27, 20, 1, 2, 3, time.UTC)
	zoned := time.Date(1, 1, 1, 0, 0, 0, 0, time.FixedZone("x", -(23*3600+59*60)))
	values := []appender{
		JobFired{},
		JobResult{},
		JobFired{FireID: uuid.Must(uuid.NewV7()), Job: JobRef{awkward, awkward, awkward}, Trigger: Key{awkward, awkward},
			Data: json.RawMessage(" { \"a\" : [1, \"x y\", \"<&>\u2028\"], \"b\":{}}\n"), ScheduledTime: at, FiredTime: zoned,
			PreviousFireTime: &at, NextFireTime: &zoned, Recovering: true, Nonconcurrent: true, RequestsRecovery: &fa,
			Timeout: awkward, PersistData: true, TriggerState: awkward, TimesTriggered: -7},
		JobFired{Data: json.RawMessage(`{}`), RequestsRecovery: &tr, TimesTriggered: 1 << 40},
		JobResult{FireID: uuid.Must(uuid.NewV7()), Job: JobRef{Group: awkward}, Trigger: Key{Name: awkward}, Worker: awkward,
			ScheduledTime: zoned, StartedTime: at, FinishedTime: at, Attempt: 3, TriggerState: awkward,
			Error: &JobError{Message: awkward, Retryable: true, Final: true, Interrupted: true}, Data: json.RawMessage(`[ 1 ,2 ]`)},
		JobResult{Error: &JobError{}, Data: json.RawMessage{}},
		// encoding/json refuses these: a year of five digits, a zone of 24 hours, data that is
		// not JSON or is empty.
		JobFired{ScheduledTime: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		JobFired{FiredTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("y", 24*3600))},
		JobFired{Data: json.RawMessage(`{"a":`)},
		JobFired{Data: json.RawMessage{}},
		JobResult{FinishedTime: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		JobResult{Data: json.RawMessage(`nul`)},
		JobGone{}, JobGone{Job: Key{awkward, ""}, Reason: awkward},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		values = append(values, randomFired(rng), randomResult(rng))
	}
	for _, v := range values {
		want, wantErr := json.Marshal(v)
		got, err := v.AppendJSON([]byte("prefix"))
		switch {
		case (err != nil) != (wantErr != nil):
			t.Fatalf("%#v: AppendJSON error %v, encoding/json's %v", v, err, wantErr)
		case err == nil && string(got) != "prefix"+string(want):
			t.Fatalf("%#v:\n got %s\nwant prefix%s", v, got, want)
		}
	}
}

func randomString(rng *rand.Rand) string {
	const alphabet = "ab<>&\"\\\n\x01 é😀\u2028\xff"
	r := []rune(alphabet)
	b := make([]byte, 0, 16)
	for range rng.IntN(12) {
		if rng.IntN(8) == 0 {
			b = append(b, "\xff"...)
			continue
		}
		b = append(b, string(r[rng.IntN(len(r))])...)
	}
	return string(b)
}

func randomTime(rng *rand.Rand) time.Time {
	zone := time.UTC
	if rng.IntN(3) == 0 {
		zone = time.FixedZone("z", rng.IntN(2*24*3600)-24*3600)
	}
	return time.Unix(rng.Int64N(1<<36)-1<<35, rng.Int64N(1e9)*int64(rng.IntN(2))).In(zone)
}

func randomRaw(rng *rand.Rand) json.RawMessage {
	switch rng.IntN(7) {
	case 0:
		return nil
	case 4:
		return json.RawMessage(`{"amp":"&"}`)
	case 5:
		return json.RawMessage("[\"\u2028\"]")
	case 6:
		return json.RawMessage(`{"gt":">"}`)
	case 1:
		return json.RawMessage(`{"k": "` + "<v w>" + `", "n": [1, 2.5, null, true]}`)
	case 2:
		b, _ := json.Marshal(map[string]string{randomString(rng): randomString(rng)})
		return b
	default:
		return json.RawMessage(`{}`)
	}
}

func randomFired(rng *rand.Rand) JobFired {
	f := JobFired{FireID: uuid.New(), Job: JobRef{randomString(rng), randomString(rng), randomString(rng)},
		Trigger: Key{randomString(rng), randomString(rng)}, Data: randomRaw(rng), ScheduledTime: randomTime(rng),
		FiredTime: randomTime(rng), Recovering: rng.IntN(2) == 0, Nonconcurrent: rng.IntN(2) == 0,
		PersistData: rng.IntN(2) == 0, TriggerState: randomString(rng), TimesTriggered: rng.IntN(1 << 20)}
	if rng.IntN(2) == 0 {
		p := randomTime(rng)
		f.PreviousFireTime = &p
	}
	if rng.IntN(2) == 0 {
		n := randomTime(rng)
		f.NextFireTime = &n
	}
	if rng.IntN(2) == 0 {
		r := rng.IntN(2) == 0
		f.RequestsRecovery = &r
	}
	if rng.IntN(2) == 0 {
		f.Timeout = randomString(rng)
	}
	return f
}

func randomResult(rng *rand.Rand) JobResult {
	r := JobResult{FireID: uuid.New(), Job: JobRef{randomString(rng), randomString(rng), randomString(rng)},
		Trigger: Key{randomString(rng), randomString(rng)}, ScheduledTime: randomTime(rng), Worker: randomString(rng),
		StartedTime: randomTime(rng), FinishedTime: randomTime(rng), Attempt: rng.IntN(100), Data: randomRaw(rng)}
	if rng.IntN(2) == 0 {
		r.Error = &JobError{Message: randomString(rng), Retryable: rng.IntN(2) == 0, Final: rng.IntN(2) == 0,
			Interrupted: rng.IntN(2) == 0}
	}
	if rng.IntN(2) == 0 {
		r.TriggerState = randomString(rng)
	}
	return r
}

// BenchmarkEncodeJobFired is what a scheduler pays to encode a fire's data (go test -bench
// EncodeJobFired ./internal/events), by hand and by encoding/json.
func BenchmarkEncodeJobFired(b *testing.B) {
	next := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	recovery := false
	fired := JobFired{FireID: uuid.Must(uuid.NewV7()), Job: JobRef{Group: "reports", Name: "daily-stats", Type: "http"},
		Trigger: Key{Group: "reports", Name: "nightly"}, Data: json.RawMessage(`{"url":"http://reports.internal/run","method":"POST"}`),
		ScheduledTime: next.AddDate(0, 0, -1), FiredTime: next.AddDate(0, 0, -1).Add(4 * time.Millisecond), NextFireTime: &next,
		RequestsRecovery: &recovery, Timeout: "5m0s", TriggerState: "WAITING", TimesTriggered: 2}
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fired.AppendJSON(make([]byte, 0, 512)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(fired); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The whole NATS message of the event, as the outbox publishes it.
	b.Run("Message", func(b *testing.B) {
		ev, err := New(TypeJobFired, Source("default", "sched-1"), AggregateJob, "reports.daily-stats",
			Subjects("default").Fired("http"), time.Now(), fired)
		if err != nil {
			b.Fatal(err)
		}
		ev.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Message(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
