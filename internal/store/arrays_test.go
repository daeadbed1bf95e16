package store

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// With EncodeArraysDirectly, the slices it encodes itself encode to the bytes pgx's own codecs
// make of them, NULLs (a nil slice, a nil []byte element) and empty arrays included; other
// values and the text format still go to pgx's codecs.
func TestEncodeArraysDirectly(t *testing.T) {
	plain, m := pgtype.NewMap(), pgtype.NewMap()
	EncodeArraysDirectly(m)
	now := time.Now()
	for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
		for _, c := range []struct {
			oid   uint32
			value any
		}{
			{pgtype.TextArrayOID, []string{"a", "", "größe", `{"x": [1, "y"]}`}},
			{pgtype.TextArrayOID, []string{}},
			{pgtype.TextArrayOID, []string(nil)},
			{pgtype.TextArrayOID, [][]byte{[]byte("a"), {}, nil, []byte(`{"data":1}`)}},
			{pgtype.TextArrayOID, [][]byte{[]byte("a"), []byte("b")}},
			{pgtype.TextArrayOID, [][]byte(nil)},
			{pgtype.TimestamptzArrayOID, []time.Time{now, now.UTC(), time.Unix(0, 1), time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
				time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 6, 1, 12, 0, 0, 123456789, time.FixedZone("x", 3600))}},
			{pgtype.TimestamptzArrayOID, []time.Time{}},
			{pgtype.TimestamptzArrayOID, []time.Time(nil)},
			{pgtype.UUIDArrayOID, []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewRandom())}},
			{pgtype.UUIDArrayOID, []uuid.UUID{}},
			{pgtype.UUIDArrayOID, []uuid.UUID(nil)},
			{pgtype.Int8ArrayOID, []int64{1, 2}}, // not encoded directly
		} {
			want, err := plain.Encode(c.oid, format, c.value, []byte("prefix"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Encode(c.oid, format, c.value, []byte("prefix"))
			if err != nil {
				t.Fatalf("encoding %#v: %v", c.value, err)
			}
			if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
				t.Errorf("format %d: %#v encoded to %x, want %x", format, c.value, got, want)
			}
			var direct bool
			switch m.PlanEncode(c.oid, format, c.value).(type) {
			case textArray[string], textArray[[]byte], timestamptzArray, uuidArray:
				direct = true
			}
			if wantDirect := format == pgtype.BinaryFormatCode && c.oid != pgtype.Int8ArrayOID; direct != wantDirect {
				t.Errorf("format %d: %#v encoded directly: %v, want %v", format, c.value, direct, wantDirect)
			}
		}
	}
}

// BenchmarkEncodeArrays encodes the array parameters of one log append of 500 events (their
// types and their data), as pgx's codecs do and as EncodeArraysDirectly does.
//
//	go test ./internal/store -run '^$' -bench EncodeArrays
func BenchmarkEncodeArrays(b *testing.B) {
	types, datas, times := make([]string, 500), make([][]byte, 500), make([]time.Time, 500)
	for i := range types {
		types[i] = "agate.job.fired"
		datas[i] = bytes.Repeat([]byte("x"), 600)
		times[i] = time.Now()
	}
	direct := pgtype.NewMap()
	EncodeArraysDirectly(direct)
	for _, c := range []struct {
		name string
		m    *pgtype.Map
	}{{"pgx", pgtype.NewMap()}, {"direct", direct}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				// pgx encodes each parameter from a small buffer (ExtendedQueryBuilder.reset).
				for _, p := range []struct {
					oid uint32
					v   any
				}{{pgtype.TextArrayOID, types}, {pgtype.TextArrayOID, datas}, {pgtype.TimestamptzArrayOID, times}} {
					if _, err := c.m.Encode(p.oid, pgtype.BinaryFormatCode, p.v, make([]byte, 0, 256)); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
