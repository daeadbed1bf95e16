package store_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/store"
)

// CollectGeneric returns the statement's rows, ScanGeneric its row, ExecGeneric runs one, and leaves the transaction planning with custom
// plans again, also when the statement failed inside a savepoint that was rolled back.
func TestCollectGenericLeavesCustomPlans(t *testing.T) {
	ctx := t.Context()
	pool, err := store.Open(ctx, testenv.MigratedDatabase(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	mode := func(tx pgx.Tx) string {
		var m string
		if err := tx.QueryRow(ctx, "show plan_cache_mode").Scan(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	err = store.InTx(ctx, pool, func(tx pgx.Tx) error {
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
}

// A transaction whose last statement commits it in the same round trip (ScanCommit,
// ScanGenericCommit under InTxCommitting) is committed, its connection goes back to the pool
// idle (the pool would close one left in a transaction), and a failure in that round trip
// rolls the whole transaction back.
func TestInTxCommittingCommitsWithTheLastStatement(t *testing.T) {
	ctx := t.Context()
	pool, err := store.Open(ctx, testenv.MigratedDatabase(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "create table committed (x int primary key)"); err != nil {
		t.Fatal(err)
	}
	backend := func() uint32 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release()
		return c.Conn().PgConn().PID()
	}
	pid := backend()
	count := func() int {
		var n int
		if err := pool.QueryRow(ctx, "select count(*) from committed").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for name, last := range map[string]func(tx pgx.Tx, x int) error{
		"ScanCommit": func(tx pgx.Tx, x int) error {
			var got int
			return store.ScanCommit(ctx, tx, []any{&got}, "insert into committed values ($1) returning x", x)
		},
		"ScanGenericCommit": func(tx pgx.Tx, x int) error {
			var got int
			return store.ScanGenericCommit(ctx, tx, []any{&got}, "insert into committed select x from unnest($1::int4[]) x returning x", []int32{int32(x)})
		},
	} {
		if _, err := pool.Exec(ctx, "truncate committed"); err != nil {
			t.Fatal(err)
		}
		err := store.InTxCommitting(ctx, pool, func(tx pgx.Tx) (bool, error) {
			if _, err := tx.Exec(ctx, "insert into committed values (1)"); err != nil {
				return false, err
			}
			return true, last(tx, 2)
		})
		if err != nil || count() != 2 {
			t.Fatalf("%s: error %v, %d rows; want both committed", name, err, count())
		}
		// The last statement fails (a duplicate key): nothing of the transaction stays.
		err = store.InTxCommitting(ctx, pool, func(tx pgx.Tx) (bool, error) {
			if _, err := tx.Exec(ctx, "insert into committed values (3)"); err != nil {
				return false, err
			}
			return true, last(tx, 2)
		})
		if err == nil || count() != 2 {
			t.Fatalf("%s with a failing last statement: error %v, %d rows; want an error and the 2 rows before it", name, err, count())
		}
		if got := backend(); got != pid {
			t.Fatalf("%s: the pool's connection changed (backend %d, was %d): it was left in a transaction", name, got, pid)
		}
	}
}
