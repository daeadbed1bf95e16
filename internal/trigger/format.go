package trigger

import "time"

// FormatTime renders t the way the Quartz reference vectors and agatectl print instants:
// RFC 3339 in t's zone offset, "Z" for a zero offset, milliseconds only when non-zero.
func FormatTime(t time.Time) string {
	if t.Nanosecond()/1e6 != 0 {
		return t.Format("2006-01-02T15:04:05.000Z07:00")
	}
	return t.Format("2006-01-02T15:04:05Z07:00")
}
