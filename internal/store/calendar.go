package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/trigger"
)

// LoadCalendars reads and parses the named calendars of a namespace: the one calendar loader of
// every step. Empty and repeated names are ignored. Names not found are absent from the map; the
// caller decides whether that is an error.
func LoadCalendars(ctx context.Context, tx pgx.Tx, namespace string, names []string) (map[string]trigger.Calendar, error) {
	cals := map[string]trigger.Calendar{}
	names = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(names))), func(n string) bool { return n == "" })
	if len(names) == 0 {
		return cals, nil
	}
	rows, err := tx.Query(ctx, queries.Get("LoadCalendars"), namespace, names)
	if err != nil {
		return nil, fmt.Errorf("loading calendars: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var data []byte
		if err := rows.Scan(&name, &data); err != nil {
			return nil, fmt.Errorf("loading calendars: %w", err)
		}
		cal, err := trigger.ParseCalendar(data)
		if err != nil {
			return nil, fmt.Errorf("calendar %q is unreadable: %w", name, err)
		}
		cals[name] = cal
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading calendars: %w", err)
	}
	return cals, nil
}
