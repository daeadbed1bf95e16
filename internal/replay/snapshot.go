package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/retry"
	"github.com/agatesched/agate/internal/store"
)

// snapshotForm is the stored form of a State: maps keyed by structs do not encode as JSON.
type snapshotForm struct {
	Jobs         []*Job      `json:"jobs"`
	Triggers     []*Trigger  `json:"triggers"`
	Fired        []*Fired    `json:"fired"`
	Calendars    []*Calendar `json:"calendars"`
	PausedGroups []string    `json:"pausedGroups"`
}

func (s *State) encode() ([]byte, error) {
	var f snapshotForm
	for _, j := range s.Jobs {
		f.Jobs = append(f.Jobs, j)
	}
	for _, t := range s.Triggers {
		f.Triggers = append(f.Triggers, t)
	}
	for _, x := range s.Fired {
		f.Fired = append(f.Fired, x)
	}
	for _, c := range s.Calendars {
		f.Calendars = append(f.Calendars, c)
	}
	for g := range s.PausedGroups {
		f.PausedGroups = append(f.PausedGroups, g)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(f); err != nil {
		return nil, fmt.Errorf("encoding the snapshot: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("encoding the snapshot: %w", err)
	}
	return buf.Bytes(), nil
}

func decodeState(b []byte) (*State, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	var f snapshotForm
	if err := json.NewDecoder(zr).Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading the snapshot: %w", err)
	}
	s := NewState()
	for _, j := range f.Jobs {
		s.Jobs[j.Key] = j
	}
	for _, t := range f.Triggers {
		s.putTrigger(t)
	}
	for _, x := range f.Fired {
		s.Fired[x.ID] = x
	}
	for _, c := range f.Calendars {
		s.Calendars[c.Name] = c
	}
	for _, g := range f.PausedGroups {
		s.PausedGroups[g] = true
	}
	return s, nil
}

// Snapshot is a stored projection: the state after every event of the namespace whose seq is
// below Below, a prefix of the log.
type Snapshot struct {
	Below int64 // the seq fence; 0 for a snapshot taken before migration 022, fenced by Fence
	// Fence is one above the id of a transaction the snapshot committed right after reserving
	// Below: every transaction below it had ended when it read the log. It orders snapshots; for
	// one taken before migration 022 it is the fence itself (the oldest transaction then running).
	Fence   uint64
	TakenAt time.Time
	Events  int // events applied to the previous snapshot to make this one
}

// tail is where replay from s goes on: its events are those at or above both.
func (s Snapshot) tail() (fromSeq int64, fromXid uint64) {
	if s.Below > 0 {
		return s.Below, 0
	}
	return 0, s.Fence
}

// latest reads the namespace's latest snapshot; a namespace without one starts empty, at fence 0.
func latest(ctx context.Context, tx pgx.Tx, ns string) (*State, Snapshot, error) {
	var snap Snapshot
	var state []byte
	err := tx.QueryRow(ctx, `select coalesce(seq_below, 0), fence::text::bigint, taken_at, events, state from event_snapshots
		where sched_name = $1 order by fence desc limit 1`, ns).Scan(&snap.Below, &snap.Fence, &snap.TakenAt, &snap.Events, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return NewState(), Snapshot{}, nil
	}
	if err != nil {
		return nil, snap, fmt.Errorf("reading the latest snapshot: %w", err)
	}
	st, err := decodeState(state)
	return st, snap, err
}

// snapshotWait bounds how long a snapshot waits for the transactions open when it began.
const snapshotWait = time.Minute

// TakeSnapshot stores the projection of a prefix of namespace ns's log, every event below a
// fresh seq fence: the latest snapshot plus the events after it, in log order. The fence is a
// reserved seq, so every event logged later lies above it; every transaction that may hold a
// seq below it already has its transaction id (the log's appends take it first, migration 022),
// so the snapshot takes an id of its own after the reservation, waits until every transaction
// below that one has ended, and then reads the log. It keeps the two latest snapshots.
//
// A namespace's snapshots are taken one at a time, each on the one before (the nodes' upkeep
// takes turns, but not with a snapshot taken outside it).
func TakeSnapshot(ctx context.Context, pool *pgxpool.Pool, ns string) (Snapshot, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	defer conn.Release()
	release, err := store.WaitTurn(ctx, conn, "agate:snapshot:"+ns)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	defer release()
	below, fence, err := reserveFence(ctx, conn)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := store.AllowIdle(ctx, tx); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	st, prev, err := latest(ctx, tx, ns)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	n, err := apply(ctx, tx, st, ns, prev, below)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	body, err := st.encode()
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Below: below, Fence: fence, Events: n}
	// Two snapshots with one id fence hold the same events: no transaction began between them.
	if err := tx.QueryRow(ctx, `insert into event_snapshots (sched_name, fence, seq_below, events, state)
		values ($1, $2::text::xid8, $3, $4, $5)
		on conflict (sched_name, fence) do update set taken_at = event_snapshots.taken_at
		returning taken_at`, ns, strconv.FormatUint(fence, 10), below, n, body).Scan(&snap.TakenAt); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: storing it: %w", err)
	}
	if _, err := tx.Exec(ctx, `delete from event_snapshots where sched_name = $1 and fence < all (
		select fence from event_snapshots where sched_name = $1 order by fence desc limit 2)`, ns); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: deleting older ones: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	return snap, nil
}

// reserveFence reserves a seq for a snapshot's fence, then waits until every transaction that
// had an id when it did has ended: after that, every event below the fence is committed or
// rolled back for good. It returns the fence and the transaction id it waited below.
func reserveFence(ctx context.Context, conn *pgxpool.Conn) (below int64, xmax uint64, err error) {
	if err := conn.QueryRow(ctx, `select nextval('events_seq_seq')`).Scan(&below); err != nil {
		return 0, 0, fmt.Errorf("reserving its fence: %w", err)
	}
	// A transaction of its own, after the reservation, takes an id: it is above the id of every
	// transaction that reserved before, and once it has ended a snapshot's xmin counts every
	// transaction below it that is still running. (A snapshot's xmax is not the next id to be
	// taken but the newest ended one + 1: a running transaction at or above it, which may hold a
	// seq below the fence, is left out of the snapshot's xmin.)
	if err := conn.QueryRow(ctx, `select pg_current_xact_id()::text::bigint + 1`).Scan(&xmax); err != nil {
		return 0, 0, fmt.Errorf("reserving its fence: %w", err)
	}
	// PostgreSQL has no call that waits for other transactions to end: poll, from 1 ms up to
	// 100 ms apart.
	ctx, cancel := context.WithTimeout(ctx, snapshotWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		var oldest uint64
		if err := conn.QueryRow(ctx, `select pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&oldest); err != nil {
			return 0, 0, fmt.Errorf("waiting for the transactions open when it began: %w", err)
		}
		if oldest >= xmax {
			return below, xmax, nil
		}
		select {
		case <-ctx.Done():
			return 0, 0, fmt.Errorf("transaction %d, open when it began, has not ended (it waits up to %s; "+
				"pg_stat_activity shows what runs it): %w", oldest, snapshotWait, ctx.Err())
		case <-time.After(retry.Delay(attempt, time.Millisecond, 100*time.Millisecond)):
		}
	}
}

// apply applies to st, in log order, the events of namespace ns after snapshot from and below
// seq to (0: no upper bound). It returns how many it applied.
func apply(ctx context.Context, tx pgx.Tx, st *State, ns string, from Snapshot, to int64) (int, error) {
	if to <= 0 {
		to = math.MaxInt64
	}
	fromSeq, fromXid := from.tail()
	rows, err := tx.Query(ctx, `select seq, type, source, data::text, coalesce(trace_context, '')
		from events where sched_name = $1 and seq >= $2 and seq < $3 and xid >= $4::text::xid8 order by seq`,
		ns, fromSeq, to, strconv.FormatUint(fromXid, 10))
	if err != nil {
		return 0, fmt.Errorf("reading the log: %w", err)
	}
	defer rows.Close()
	n := 0
	var r Record
	for rows.Next() {
		if err := rows.Scan(&r.Seq, &r.Type, &r.Source, &r.Data, &r.TraceContext); err != nil {
			return n, fmt.Errorf("reading the log: %w", err)
		}
		if err := st.Apply(r); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("reading the log: %w", err)
	}
	return n, nil
}
