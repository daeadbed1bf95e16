package store

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// EncodeArraysDirectly has pgx encode a []string or [][]byte parameter of type text[], a
// []time.Time of type timestamptz[] and a []uuid.UUID of type uuid[] in one pass over the
// slice, into a buffer grown once to the array's size. pgx's array codec boxes every element
// into an interface, finds its element plan, and grows its parameter buffer from 256 bytes by
// doubling; a [][]byte goes through reflection. Agate's hot statements take their rows as such
// arrays (a log append carries every event's data), and encoding them was a sixth of a
// scheduler's CPU in a burst. The bytes sent are those pgx sends (TestEncodeArraysDirectly).
// Open registers it on every connection; other types and the text format go to pgx's codecs.
func EncodeArraysDirectly(m *pgtype.Map) {
	for _, oid := range []uint32{pgtype.TextArrayOID, pgtype.TimestamptzArrayOID, pgtype.UUIDArrayOID} {
		if t, ok := m.TypeForOID(oid); ok {
			m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: directArrays{Codec: t.Codec}})
		}
	}
}

// directArrays is pgx's codec of an array type, but for the slices it encodes directly.
type directArrays struct{ pgtype.Codec }

func (c directArrays) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case []string:
			if oid == pgtype.TextArrayOID {
				return textArray[string]{}
			}
		case [][]byte:
			if oid == pgtype.TextArrayOID {
				return textArray[[]byte]{}
			}
		case []time.Time:
			if oid == pgtype.TimestamptzArrayOID {
				return timestamptzArray{}
			}
		case []uuid.UUID:
			if oid == pgtype.UUIDArrayOID {
				return uuidArray{}
			}
		}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// appendArrayHeader appends the header of a one-dimensional array of n elements of type elem,
// in PostgreSQL's binary format (array_recv).
func appendArrayHeader(buf []byte, n int, containsNull bool, elem uint32) []byte {
	var null uint32
	if containsNull {
		null = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, null)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	return binary.BigEndian.AppendUint32(buf, 1) // lower bound
}

const arrayHeaderSize = 20

// textArray encodes a []string or a [][]byte as text[]; a nil []byte element is NULL, as pgx
// encodes it.
type textArray[T string | []byte] struct{}

func (textArray[T]) Encode(value any, buf []byte) ([]byte, error) {
	elems := value.([]T)
	if elems == nil {
		return nil, nil // NULL, as pgx encodes a nil slice
	}
	raw, _ := value.([][]byte) // elements that may be NULL
	null := func(i int) bool { return raw != nil && raw[i] == nil }
	size, containsNull := arrayHeaderSize, false
	for i, e := range elems {
		size += 4 + len(e)
		containsNull = containsNull || null(i)
	}
	buf = slices.Grow(buf, size)
	buf = appendArrayHeader(buf, len(elems), containsNull, pgtype.TextOID)
	for i, e := range elems {
		if null(i) {
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff) // -1: NULL
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e)))
		buf = append(buf, e...)
	}
	return buf, nil
}

// timestamptzArray encodes a []time.Time as timestamptz[]: microseconds since 2000-01-01 UTC,
// truncated as pgx truncates them.
type timestamptzArray struct{}

// unixToY2K is 2000-01-01 UTC in microseconds since the Unix epoch.
const unixToY2K = 946684800 * 1000000

func (timestamptzArray) Encode(value any, buf []byte) ([]byte, error) {
	return appendFixedArray(buf, value.([]time.Time), pgtype.TimestamptzOID, 8, func(buf []byte, t time.Time) []byte {
		return binary.BigEndian.AppendUint64(buf, uint64(t.Unix()*1000000+int64(t.Nanosecond())/1000-unixToY2K))
	}), nil
}

// uuidArray encodes a []uuid.UUID as uuid[].
type uuidArray struct{}

func (uuidArray) Encode(value any, buf []byte) ([]byte, error) {
	return appendFixedArray(buf, value.([]uuid.UUID), pgtype.UUIDOID, 16, func(buf []byte, id uuid.UUID) []byte {
		return append(buf, id[:]...)
	}), nil
}

// appendFixedArray appends elems as an array of type elem whose elements are size bytes each,
// as put appends them; nil (NULL) for a nil slice, as pgx encodes it.
func appendFixedArray[T any](buf []byte, elems []T, elem uint32, size int, put func([]byte, T) []byte) []byte {
	if elems == nil {
		return nil
	}
	buf = slices.Grow(buf, arrayHeaderSize+(4+size)*len(elems))
	buf = appendArrayHeader(buf, len(elems), false, elem)
	for _, e := range elems {
		buf = binary.BigEndian.AppendUint32(buf, uint32(size))
		buf = put(buf, e)
	}
	return buf
}
