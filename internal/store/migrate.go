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
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
