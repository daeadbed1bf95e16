package store_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/store"
)

// A transaction left idle between statements, as by a node frozen in the middle of it, is ended
// by the server after store.IdleInTxTimeout and its locks go: another transaction waiting for
// them gets them, and the idle one's next statement fails with an error the loops retry.
func TestAnIdleTransactionLosesItsLocks(t *testing.T) {
	ctx := t.Context()
	dbURL := testenv.MigratedDatabase(t)

	pool, err := store.Open(ctx, dbURL, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var setting string
	if err := pool.QueryRow(ctx, "show idle_in_transaction_session_timeout").Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if want := store.IdleInTxTimeout.String(); setting != want {
		t.Errorf("idle_in_transaction_session_timeout = %s, want %s", setting, want)
	}

	// The URL's own setting wins; a short one keeps the test short.
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(store.IdleInTxParam, "300")
	u.RawQuery = q.Encode()
	frozen, err := store.Open(ctx, u.String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	tx, err := frozen.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "select pg_advisory_xact_lock(7001)"); err != nil {
		t.Fatal(err)
	}

	// Waits for the lock the idle transaction holds; without the timeout it would give up
	// after lock_timeout.
	waiter, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = waiter.Rollback(ctx) }()
	if _, err := waiter.Exec(ctx, "set local lock_timeout = '30s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Exec(ctx, "select pg_advisory_xact_lock(7001)"); err != nil {
		t.Fatalf("the lock an idle transaction held was not released: %v", err)
	}

	_, err = tx.Exec(ctx, "select 1")
	if err == nil {
		t.Fatal("the idle transaction went on after the server ended it")
	}
	if !store.IsTransient(err) {
		t.Errorf("the error of a transaction the server ended as idle is not transient: %v", err)
	}
}

// A transaction that takes no lock row and may work long between statements (replay, a
// snapshot) lifts the timeout for itself only.
func TestAllowIdleLiftsTheTimeoutForOneTransaction(t *testing.T) {
	ctx := t.Context()
	pool, err := store.Open(ctx, testenv.MigratedDatabase(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	show := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var v string
		if err := q.QueryRow(ctx, "show idle_in_transaction_session_timeout").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.AllowIdle(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if got := show(tx); got != "0" {
		t.Errorf("in the transaction: %s, want 0", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := show(pool), store.IdleInTxTimeout.String(); got != want {
		t.Errorf("after it, on the same connection: %s, want %s", got, want)
	}
}
