package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/trigger"
)

// Calendars are the calendars a step loaded, by name.
type Calendars struct {
	parsed map[string]trigger.Calendar
	broken map[string]error // stored forms that no longer parse
}

// For is the calendar a trigger names: nil for "" (none), and an error when the calendar's
// stored form cannot be read (the trigger cannot be computed).
func (c Calendars) For(name string) (trigger.Calendar, error) {
	if err := c.broken[name]; err != nil {
		return nil, fmt.Errorf("calendar %q is unreadable: %w", name, err)
	}
	return c.parsed[name], nil
}

// Has reports whether a calendar of that name exists.
func (c Calendars) Has(name string) bool {
	_, ok := c.parsed[name]
	return ok || c.broken[name] != nil
}

// LoadCalendars reads and parses the named calendars of a namespace: the one calendar loader of
// every step. Empty and repeated names are ignored; names not found are absent.
func LoadCalendars(ctx context.Context, tx pgx.Tx, namespace string, names []string) (Calendars, error) {
	cals := Calendars{parsed: map[string]trigger.Calendar{}, broken: map[string]error{}}
	names = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(names))), func(n string) bool { return n == "" })
	if len(names) == 0 {
		return cals, nil
	}
	rows, err := tx.Query(ctx, queries.Get("LoadCalendars"), namespace, names)
	if err != nil {
		return cals, fmt.Errorf("loading calendars: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var data []byte
		if err := rows.Scan(&name, &data); err != nil {
			return cals, fmt.Errorf("loading calendars: %w", err)
		}
		if cal, err := trigger.ParseCalendar(data); err != nil {
			cals.broken[name] = err
		} else {
			cals.parsed[name] = cal
		}
	}
	if err := rows.Err(); err != nil {
		return cals, fmt.Errorf("loading calendars: %w", err)
	}
	return cals, nil
}
