package store

import (
	"bytes"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// With EncodeUUIDsAsBytes, a UUID and a slice of them encode to the bytes their [16]byte forms
// encode to, in both formats, and a nil slice is still NULL.
func TestEncodeUUIDsAsBytes(t *testing.T) {
	plain, m := pgtype.NewMap(), pgtype.NewMap()
	EncodeUUIDsAsBytes(m)
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewRandom())
	for _, format := range []int16{pgtype.BinaryFormatCode, pgtype.TextFormatCode} {
		for _, c := range []struct {
			oid     uint32
			value   any
			asBytes any
		}{
			{pgtype.UUIDOID, a, [16]byte(a)},
			{pgtype.UUIDArrayOID, []uuid.UUID{a, b}, [][16]byte{a, b}},
			{pgtype.UUIDArrayOID, []uuid.UUID{}, [][16]byte{}},
			{pgtype.UUIDArrayOID, []uuid.UUID(nil), [][16]byte(nil)},
		} {
			want, err := plain.Encode(c.oid, format, c.asBytes, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Encode(c.oid, format, c.value, nil)
			if err != nil {
				t.Fatalf("encoding %#v: %v", c.value, err)
			}
			if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
				t.Errorf("format %d: %#v encoded to %x, want %x", format, c.value, got, want)
			}
		}
	}
}
