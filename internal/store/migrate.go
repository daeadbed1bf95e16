package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

// versionTable is tern's bookkeeping table.
const versionTable = "agate_schema_version"

// Migrate brings the database schema up to date with schemas/sql. tern holds a PostgreSQL
// advisory lock while it works, so several nodes starting at once are safe: one migrates, the
// others wait and then find nothing to do.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrateWith(ctx, pool, func(m *migrate.Migrator) error { return m.Migrate(ctx) })
}

// MigrateTo brings the database schema to the given migration of schemas/sql (its number), up
// or down: a test of a migration starts from the schema before it.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, version int32) error {
	return migrateWith(ctx, pool, func(m *migrate.Migrator) error { return m.MigrateTo(ctx, version) })
}

// migrateWith runs run with a migrator that has schemas/sql loaded, on a connection of pool.
func migrateWith(ctx context.Context, pool *pgxpool.Pool, run func(*migrate.Migrator) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	m, err := migrate.NewMigrator(ctx, conn.Conn(), versionTable)
	if err != nil {
		return fmt.Errorf("migrate: preparing version table: %w", err)
	}
	if err := m.LoadMigrations(sqlDir()); err != nil {
		return fmt.Errorf("migrate: loading migrations: %w", err)
	}
	if err := run(m); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
