package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Generic plans. Open has every statement planned with its actual parameters
// (force_custom_plan), because a plan cached while a table was nearly empty went on scanning it
// as it grew. A statement that only inserts the rows of its array parameters (INSERT … SELECT
// FROM unnest(…)) reads no table whose size could change its plan, so it is planned once per
// connection instead: planning the bulk intake's insert took 0.17 ms of its 0.85 ms a batch,
// and the log's 0.06 ms of 0.82. The plan mode is set around the statement, and the
// transaction's own restored after it (an InHotTx plans generically throughout), kept meanwhile
// in a setting of Agate's.
const (
	setGeneric  = "select set_config('agate.plan_cache_mode', current_setting('plan_cache_mode'), true), set_config('plan_cache_mode', 'force_generic_plan', true)"
	restorePlan = "select set_config('plan_cache_mode', current_setting('agate.plan_cache_mode'), true)"
)

// CollectGeneric runs sql, an insert from array parameters, with a generic plan and collects
// its rows with fn (pgx.CollectRows's). The plan mode is set around it in the same round trip.
func CollectGeneric[T any](ctx context.Context, tx pgx.Tx, fn pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	var out []T
	err := generic(ctx, tx, sql, args, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, fn)
		return err
	})
	return out, err
}

// ScanGeneric is CollectGeneric for a statement that returns one row, scanned into dest.
func ScanGeneric(ctx context.Context, tx pgx.Tx, dest []any, sql string, args ...any) error {
	return generic(ctx, tx, sql, args, func(br pgx.BatchResults) error { return br.QueryRow().Scan(dest...) })
}

// ExecGeneric is CollectGeneric for a statement that returns no rows.
func ExecGeneric(ctx context.Context, tx pgx.Tx, sql string, args ...any) error {
	return generic(ctx, tx, sql, args, func(br pgx.BatchResults) error {
		_, err := br.Exec()
		return err
	})
}

func generic(ctx context.Context, tx pgx.Tx, sql string, args []any, read func(pgx.BatchResults) error) error {
	b := &pgx.Batch{}
	results := queueGeneric(b, sql, args)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if err := results(br, read); err != nil {
		return err
	}
	return br.Close()
}

// queueGeneric queues sql on b with a generic plan (the plan mode set around it); the function
// it returns reads the statement's results with read, once b's earlier statements' were read.
func queueGeneric(b *pgx.Batch, sql string, args []any) func(br pgx.BatchResults, read func(pgx.BatchResults) error) error {
	b.Queue(setGeneric)
	b.Queue(sql, args...)
	b.Queue(restorePlan)
	return func(br pgx.BatchResults, read func(pgx.BatchResults) error) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("choosing a generic plan: %w", err)
		}
		if err := read(br); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("restoring the plan mode: %w", err)
		}
		return nil
	}
}
