// Package store owns Agate's PostgreSQL access: the connection pool, migrations, the one way to
// open a transaction, and the cluster lock protocol. Steps (acquire, fire, complete, …) keep their
// SQL in their own embedded queries.sql files and run it inside a store transaction.
package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/retry"
)

// PoolSizeDefault is the connections Open allows when neither its caller nor the URL
// (pool_max_conns) says: a node's loops (acquire, fire queue, completions, commands, queries,
// recovery, sweep) each hold one at times, and the fire queue runs a transaction per lock
// partition at once. pgxpool's own default, the number of CPUs (at least 4), made them queue
// for connections on small machines.
const PoolSizeDefault = 16

// IdleInTxTimeout is how long PostgreSQL lets one of Agate's transactions sit idle between
// statements before it ends the session (idle_in_transaction_session_timeout): shorter than
// the cut-off after which the cluster declares a silent node failed (2 × its check-in interval
// + 7.5 s, 17.5 s by default), so that the recovery of a node frozen in a transaction finds its
// lock partitions free.
const IdleInTxTimeout = 10 * time.Second

// IdleInTxParam is the connection parameter (and URL parameter) that sets it, in milliseconds.
const IdleInTxParam = "idle_in_transaction_session_timeout"

// AllowIdle lifts IdleInTxTimeout for the rest of tx, for a transaction that takes no lock row
// and may work for long between two statements: a replay, or a snapshot of a large namespace,
// encoding its state before it stores it.
func AllowIdle(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, "set local "+IdleInTxParam+" = 0"); err != nil {
		return fmt.Errorf("lifting the idle transaction timeout: %w", err)
	}
	return nil
}

// Open connects a pool to the database at url and checks that it answers. maxConns 0 keeps the
// URL's pool_max_conns, or PoolSizeDefault.
func Open(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("invalid DATABASE_URL: %w", err)
	}
	switch {
	case maxConns > 0:
		cfg.MaxConns = maxConns
	case !strings.Contains(url, "pool_max_conns"):
		cfg.MaxConns = PoolSizeDefault
	}
	// Agate's hot statements join a key list (unnest of arrays) to triggers, jobs or fired rows by
	// primary key. With the default random_page_cost (4, a spinning disk's) the planner prices 500
	// index probes above a hash of the whole namespace until the table holds about 40,000 rows,
	// so a burst's fire, update and delete statements scanned every trigger: 25 ms instead of
	// 4 ms per 500 keys (docs/performance-history.md). The tables Agate works on are cached, as on any
	// SSD-backed server; a URL parameter random_page_cost=… overrides this.
	if _, ok := cfg.ConnConfig.RuntimeParams["random_page_cost"]; !ok {
		cfg.ConnConfig.RuntimeParams["random_page_cost"] = "1.1"
	}
	// Plan every statement with its actual parameters. A cached generic plan is made once, when
	// a table may still be nearly empty, and kept while it grows a thousandfold within minutes
	// (a burst scheduled before autovacuum analyzes anything): under plan_cache_mode auto the
	// bulk intake's key lookup went from 0.2 ms to 20 ms a call that way, and 20,000 api
	// commands on one node took 37 s instead of 10. The price is planning at every execution,
	// foreign-key checks included (deleting 500 finished jobs: 17.8 ms in the check instead of
	// 6.3 ms); the hot statements' shapes keep even custom plans from scanning
	// (TestHotStatementsProbeKeysOnTablesNeverAnalyzed). Inserts from array parameters, which
	// read no table, keep a generic plan instead (CollectGeneric), and so do the fire path's
	// transactions, which read in index order (InHotTx).
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	// A node frozen in the middle of a transaction (stopped, its VM paused, hung) would hold
	// the lock rows it took until it went on, for ever if it never does: the other nodes set
	// that partition aside and its triggers never fire. Agate's transactions never wait for
	// anything but PostgreSQL between their statements, so one idle for IdleInTxTimeout is
	// ended by the server and its locks go; its node gets an error and retries. A URL parameter
	// idle_in_transaction_session_timeout=… (milliseconds) overrides this.
	if _, ok := cfg.ConnConfig.RuntimeParams[IdleInTxParam]; !ok {
		cfg.ConnConfig.RuntimeParams[IdleInTxParam] = strconv.FormatInt(IdleInTxTimeout.Milliseconds(), 10)
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "agate"
	}
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		EncodeUUIDsAsBytes(conn.TypeMap())
		EncodeArraysDirectly(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL at %s: %w", redact(cfg.ConnConfig), err)
	}
	if err := waitReachable(ctx, pool, redact(cfg.ConnConfig)); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// waitReachable pings the server until it answers. While it cannot be reached (not started yet,
// restarting) it says so once in the log and waits; an error that waiting cannot cure (a wrong
// password, no such database) is returned at once.
func waitReachable(ctx context.Context, pool *pgxpool.Pool, where string) error {
	for attempt := 1; ; attempt++ {
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pool.Ping(pingCtx)
		cancel()
		switch {
		case err == nil:
			if attempt > 1 {
				slog.InfoContext(ctx, "PostgreSQL is answering", slog.String("server", where))
			}
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("waiting for PostgreSQL at %s: %w", where, ctx.Err())
		case !IsTransient(err):
			return fmt.Errorf("connecting to PostgreSQL at %s: %w", where, err)
		case attempt == 1:
			slog.WarnContext(ctx, "PostgreSQL is not answering yet; waiting for it", slog.String("server", where),
				slog.String("error", err.Error()))
		}
		t := time.NewTimer(retry.Delay(attempt, 100*time.Millisecond, 5*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for PostgreSQL at %s: %w", where, ctx.Err())
		case <-t.C:
		}
	}
}

// redact names the server without its password, for error messages and logs.
func redact(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

// InTx runs fn in a transaction, committing when fn returns nil. It is the only way Agate opens
// transactions, so rollback-on-cancel is handled in one place (pgx rolls back with a fresh context).
func InTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, fn)
}

// Lock names of the Quartz lock protocol.
const (
	// LockTriggerAccess serialises acquire, fire, completion-release and trigger writes (one row
	// in global mode, one per partition in partitioned mode: see Locks).
	LockTriggerAccess = "TRIGGER_ACCESS"
	// LockStateAccess serialises cluster check-in and recovery.
	LockStateAccess = "STATE_ACCESS"
	// LockPausedGroups guards the paused groups in partitioned mode: commands that insert new
	// jobs hold it shared (Locks.NewJobs), the writes under every partition exclusively (Locks.All).
	LockPausedGroups = "PAUSED_GROUPS"
)

// WithLock takes the named cluster lock inside tx (Quartz's StdRowLockSemaphore:
// SELECT … FOR UPDATE on the locks row); it is held until tx ends. Every path that changes
// trigger or fired-trigger rows takes it first.
func WithLock(ctx context.Context, tx pgx.Tx, namespace, name string) error {
	var one int
	return lockErr(tx.QueryRow(ctx, queries.Get("Lock"), namespace, name).Scan(&one), namespace, name)
}

// lockErr is the error of a statement that took lock row name: nil, a missing row, or the
// statement's failure.
func lockErr(err error, namespace, name string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("lock row %s/%s is missing; run the scheduler once to create it", namespace, name)
	}
	if err != nil {
		return fmt.Errorf("taking lock %s: %w", name, err)
	}
	return nil
}

// IsTransient reports whether err is worth retrying: a lost connection, a serialization failure,
// a deadlock or a transaction the server ended as idle (IdleInTxTimeout), as opposed to a bug or
// bad data.
func IsTransient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "57P01", "57P02", "57P03", "08000", "08003", "08006", "25P03":
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err) || errors.Is(err, context.DeadlineExceeded) || isConnErr(err)
}

// isConnErr reports a connection that could not be made or was lost: the server is down,
// restarting, or unreachable.
func isConnErr(err error) bool {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.Timeout(err)
}
