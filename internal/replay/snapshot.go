package replay

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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

// Snapshot is a stored projection: the state after every event of the namespace whose
// transaction id is below Fence.
type Snapshot struct {
	Fence   uint64
	TakenAt time.Time
	Events  int // events applied to the previous snapshot to make this one
}

// latest reads the namespace's latest snapshot; a namespace without one starts empty, at fence 0.
func latest(ctx context.Context, tx pgx.Tx, ns string) (*State, Snapshot, error) {
	var snap Snapshot
	var state []byte
	err := tx.QueryRow(ctx, `select fence::text::bigint, taken_at, events, state from event_snapshots
		where sched_name = $1 order by fence desc limit 1`, ns).Scan(&snap.Fence, &snap.TakenAt, &snap.Events, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return NewState(), Snapshot{}, nil
	}
	if err != nil {
		return nil, snap, fmt.Errorf("reading the latest snapshot: %w", err)
	}
	st, err := decodeState(state)
	return st, snap, err
}

// TakeSnapshot stores the projection of every event of namespace ns committed so far: the
// latest snapshot plus the events after it. The fence is the oldest transaction still running
// when it starts, so no event it leaves out is older than one it applied, and replay goes on
// from there. It keeps the two latest snapshots.
func TakeSnapshot(ctx context.Context, pool *pgxpool.Pool, ns string) (Snapshot, error) {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := store.AllowIdle(ctx, tx); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	var fence uint64
	if err := tx.QueryRow(ctx, `select pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&fence); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	st, prev, err := latest(ctx, tx, ns)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	n, err := apply(ctx, tx, st, ns, prev.Fence, fence)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	body, err := st.encode()
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Fence: fence, Events: n}
	if err := tx.QueryRow(ctx, `insert into event_snapshots (sched_name, fence, events, state)
		values ($1, $2::text::xid8, $3, $4)
		on conflict (sched_name, fence) do update set taken_at = event_snapshots.taken_at
		returning taken_at`, ns, strconv.FormatUint(fence, 10), n, body).Scan(&snap.TakenAt); err != nil {
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

// apply applies to st, in log order, the events of namespace ns whose transaction id is at
// least from and below to (0: no upper bound). It returns how many it applied.
func apply(ctx context.Context, tx pgx.Tx, st *State, ns string, from, to uint64) (int, error) {
	upper := "9223372036854775807"
	if to > 0 {
		upper = strconv.FormatUint(to, 10)
	}
	rows, err := tx.Query(ctx, `select seq, type, source, data::text, coalesce(trace_context, '')
		from events where sched_name = $1 and xid >= $2::text::xid8 and xid < $3::text::xid8 order by seq`,
		ns, strconv.FormatUint(from, 10), upper)
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
