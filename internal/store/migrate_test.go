package store_test

import (
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/schemas"
)

// Every migration's down section undoes it: the schema at each version is the same whether
// reached from an empty database going up or from the latest going down (an operator rolling
// back a release runs them).
func TestMigrationsGoDownToWhatTheyCameUpFrom(t *testing.T) {
	ctx := t.Context()
	files, err := fs.Glob(schemas.SQL, "sql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations embedded (%v)", err)
	}
	latest := int32(len(files))
	up, down := openOn(t, testenv.Database(t), 2), openOn(t, testenv.Database(t), 2) // no schema yet

	upward := make([]string, latest)
	for v := range latest {
		if err := store.MigrateTo(ctx, up, v); err != nil {
			t.Fatalf("migrating up to %d: %v", v, err)
		}
		upward[v] = schemaOf(t, up)
	}
	if err := store.Migrate(ctx, down); err != nil {
		t.Fatal(err)
	}
	for v := latest - 1; v >= 0; v-- {
		if err := store.MigrateTo(ctx, down, v); err != nil {
			t.Fatalf("migrating down to %d: %v", v, err)
		}
		if got := schemaOf(t, down); got != upward[v] {
			t.Fatalf("version %d reached going down differs from going up:\nonly going down:\n%s\nonly going up:\n%s",
				v, strings.Join(missing(got, upward[v]), "\n"), strings.Join(missing(upward[v], got), "\n"))
		}
	}
}

// schemaOf lists the public schema's columns, indexes, functions, sequences and extended
// statistics, one a line; the log's partitions are named by day, which is left out.
func schemaOf(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	err := pool.QueryRow(t.Context(), `select coalesce(string_agg(d, E'\n' order by d), '') from (
		select 'index ' || regexp_replace(indexname || ': ' || indexdef, '_p[0-9]{8}|_before_partitioning', '', 'g') as d
		from pg_indexes where schemaname = 'public'
		union all select 'column ' || regexp_replace(table_name, '_p[0-9]{8}', '') || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
		from information_schema.columns where table_schema = 'public'
		union all select 'function ' || p.oid::regprocedure::text
		from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'public'
		union all select 'sequence ' || sequencename || ' by ' || increment_by from pg_sequences where schemaname = 'public'
		union all select 'statistics ' || stxname from pg_statistic_ext) x`).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// missing lists the lines of a that b does not have.
func missing(a, b string) []string {
	have := strings.Split(b, "\n")
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !slices.Contains(have, l) {
			out = append(out, l)
		}
	}
	return out
}
