package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TryTurn takes the session advisory lock named name on conn, for work that one node of a
// database does at a time (the event log's upkeep, vacuuming the fire path's tables). ok is
// false, and nothing held, when another session holds it. release gives it back; a connection
// that cannot say so is closed, which gives it back too, rather than return to the pool holding
// it.
func TryTurn(ctx context.Context, conn *pgxpool.Conn, name string) (release func(), ok bool, err error) {
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock(hashtext($1))`, name).Scan(&ok); err != nil {
		return nil, false, fmt.Errorf("taking the %s lock: %w", name, err)
	}
	if !ok {
		return nil, false, nil
	}
	return unlocker(ctx, conn, name), true, nil
}

// WaitTurn takes the session advisory lock named name on conn, waiting for it while another
// session holds it, for work that one session at a time may do (a namespace's snapshots). It
// gives up when ctx ends; release gives it back as TryTurn's does.
func WaitTurn(ctx context.Context, conn *pgxpool.Conn, name string) (release func(), err error) {
	if _, err := conn.Exec(ctx, `select pg_advisory_lock(hashtext($1))`, name); err != nil {
		// A wait cut short may have been granted the lock as it ended: the connection goes
		// rather than back to the pool.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("waiting for the %s lock: %w", name, err)
	}
	return unlocker(ctx, conn, name), nil
}

func unlocker(ctx context.Context, conn *pgxpool.Conn, name string) func() {
	return func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := conn.Exec(ctx, `select pg_advisory_unlock(hashtext($1))`, name); err != nil {
			_ = conn.Conn().Close(ctx)
		}
	}
}
