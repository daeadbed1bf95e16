package store

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// EncodeUUIDsAsBytes has pgx encode google/uuid's UUID, alone or in a slice, as the 16 bytes it
// is. UUID is a driver.Valuer, so pgx otherwise takes its Value — a string — and parses that
// back, element by element through reflection for an array of fire or event ids: 4 % of a
// scheduler's CPU while commands came in. Open registers it on every connection. (A slice in
// the binary format, pgx's choice for uuid[], goes to EncodeArraysDirectly first.)
func EncodeUUIDsAsBytes(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{wrapUUID}, m.TryWrapEncodePlanFuncs...)
}

func wrapUUID(v any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	switch v := v.(type) {
	case uuid.UUID:
		return &convertPlan{convert: func(v any) any { return [16]byte(v.(uuid.UUID)) }}, [16]byte(v), true
	case []uuid.UUID:
		return &convertPlan{convert: func(v any) any { return uuidBytes(v.([]uuid.UUID)) }}, uuidBytes(v), true
	}
	return nil, nil, false
}

func uuidBytes(ids []uuid.UUID) [][16]byte {
	if ids == nil {
		return nil // NULL, as pgx encodes a nil slice
	}
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// convertPlan encodes a value as next encodes what convert makes of it.
type convertPlan struct {
	next    pgtype.EncodePlan
	convert func(any) any
}

func (p *convertPlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *convertPlan) Encode(v any, buf []byte) ([]byte, error) {
	return p.next.Encode(p.convert(v), buf)
}
