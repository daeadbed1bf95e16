package store_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/store"
)

// CollectGeneric returns the statement's rows, ScanGeneric its row, ExecGeneric runs one, and leaves the transaction planning with custom
// plans again, also when the statement failed inside a savepoint that was rolled back; in a hot
// transaction (InHotTx), with generic plans.
func TestCollectGenericLeavesCustomPlans(t *testing.T) {
	ctx := t.Context()
	pool := openPool(t, 1)
	mode := func(tx pgx.Tx) string {
		var m string
		if err := tx.QueryRow(ctx, "show plan_cache_mode").Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	err := store.InTx(ctx, pool, func(tx pgx.Tx) error {
		got, err := store.CollectGeneric(ctx, tx, pgx.RowTo[int32], "select x from unnest($1::int4[]) x", []int32{3, 1, 2})
		if err != nil || len(got) != 3 || got[0] != 3 || got[2] != 2 {
			t.Errorf("rows %v, error %v", got, err)
		}
		if m := mode(tx); m != "force_custom_plan" {
			t.Errorf("after the statement: plan_cache_mode %s", m)
		}
		var one int32
		if err := store.ScanGeneric(ctx, tx, []any{&one}, "select x from unnest($1::int4[]) x", []int32{7}); err != nil || one != 7 {
			t.Errorf("ScanGeneric: %d, %v", one, err)
		}
		if err := store.ExecGeneric(ctx, tx, "select x from unnest($1::int4[]) x", []int32{1}); err != nil {
			t.Errorf("ExecGeneric: %v", err)
		}
		if m := mode(tx); m != "force_custom_plan" {
			t.Errorf("after ExecGeneric: plan_cache_mode %s", m)
		}
		if _, err := tx.Exec(ctx, "savepoint s"); err != nil {
			return err
		}
		if _, err := store.CollectGeneric(ctx, tx, pgx.RowTo[int32], "select 1 / x from unnest($1::int4[]) x", []int32{0}); err == nil {
			t.Error("division by zero succeeded")
		}
		if _, err := tx.Exec(ctx, "rollback to savepoint s"); err != nil {
			return err
		}
		if m := mode(tx); m != "force_custom_plan" {
			t.Errorf("after a failed statement rolled back: plan_cache_mode %s", m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A hot transaction plans generically throughout, and keeps doing so after one of them.
	err = store.InHotTx(ctx, pool, func(tx pgx.Tx) error {
		if m := mode(tx); m != "force_generic_plan" {
			t.Errorf("in a hot transaction: plan_cache_mode %s", m)
		}
		if err := store.ExecGeneric(ctx, tx, "select x from unnest($1::int4[]) x", []int32{1}); err != nil {
			t.Errorf("ExecGeneric: %v", err)
		}
		if m := mode(tx); m != "force_generic_plan" {
			t.Errorf("in a hot transaction, after ExecGeneric: plan_cache_mode %s", m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
