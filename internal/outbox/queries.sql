-- name: Append
-- One multi-row insert per batch of events (no round trip per row). It returns the
-- transaction's xid, which the node vouches for once JetStream stored the events. The events a
-- node creates have new ids: a plain insert, without ON CONFLICT's speculative insertion (an
-- index probe and a confirmation WAL record per row). The seqs come a block of 4,096 per
-- nextval (migration 013: events_seq_bases reserves the blocks, events_seq_at numbers the rows).
with b as (select events_seq_bases(cardinality($2::uuid[])) as bases), ins as (
    insert into events (seq, id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context)
    select events_seq_at(b.bases, e.n), id, $1, type, source, aggregate, aggregate_id, nullif(nats_subject, ''), time, data::jsonb,
           nullif(trace_context, '')
    from b, unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10::text[])
        with ordinality as e(id, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context, n)
)
select pg_current_xact_id()::text::bigint;

-- name: AppendFromBus
-- Append, for a batch with events taken from the bus that the log may hold already (a
-- redelivered message brings them again; $11 marks them): those are skipped. The log is
-- partitioned, so no constraint keeps ids unique; the completion step, the one writer of events
-- from the bus, appends a job's outcomes under its partition lock, so two copies of one event are
-- never appended at once. Events from the bus are logged without a subject: the probe looks
-- among those alone, in the partial index events_bus_id (migration 012), in every partition.
with b as (select events_seq_bases(cardinality($2::uuid[])) as bases), ins as (
    insert into events (seq, id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context)
    select events_seq_at(b.bases, e.n), id, $1, type, source, aggregate, aggregate_id, nullif(nats_subject, ''), time, data::jsonb,
           nullif(trace_context, '')
    from b, unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10::text[], $11::bool[])
        with ordinality as e(id, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context, probe, n)
    where not e.probe
       or not exists (select 1 from events x where x.id = e.id and x.nats_subject is null offset 0) -- a probe of events_bus_id per id
)
select pg_current_xact_id()::text::bigint;

-- name: LockCursor
-- One sweeper per namespace at a time; the others skip instead of queueing.
select last_xid::text, last_seq from outbox_cursor where sched_name = $1 for update skip locked;

-- name: SweepBatch
-- Rows after the cursor in (xid, seq) order, fenced below the oldest running transaction so a
-- row whose seq was taken before a slower transaction committed is never passed over. A row
-- a live node vouches for (its xid in the range the node's last check-in recorded: JetStream
-- stored it) is only passed over, and so are rows of other namespaces (their own sweeps
-- publish them): such a row comes back as its position alone (todo = false, the other columns
-- null). Almost every row is passed over while nodes are alive, and sending each back whole,
-- to be decoded and dropped, was most of the sweep's cost.
-- The rows come in order from events_relay, each partition's index merged, and nothing else:
-- filtering on the namespace too let the planner, on statistics that lagged behind a burst,
-- gather and sort every row after the cursor (75 ms for 60,000 instead of 2 ms). (Taking the
-- positions from the index and reading each row again by its primary key, as before, probed
-- every partition's primary key per row: a third of the sweep's cost.)
-- The xid is selected as text under another name: ORDER BY a bare name prefers an output column,
-- so "xid::text" named xid would sort as text ("1001" before "764") and the cursor, compared as
-- xid8, would pass rows for good whenever xids gain a digit.
with vouched as (
    select 'agate/' || sched_name || '/' || instance_id as source, published_from, published_below
    from scheduler_state
    where sched_name = $1 and published_below is not null
)
select e.seq, e.xid::text as xid_text, t.todo,
       case when t.todo then e.id end, case when t.todo then e.type end, case when t.todo then e.source end,
       case when t.todo then e.aggregate end, case when t.todo then e.aggregate_id end,
       case when t.todo then e.nats_subject end, case when t.todo then e.time end,
       case when t.todo then e.data end, case when t.todo then coalesce(e.trace_context, '') end
from (select seq, xid, sched_name, id, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context
      from events
      where nats_subject is not null
        and (xid, seq) > ($2::xid8, $3::bigint)
        and xid < pg_snapshot_xmin(pg_current_snapshot())
      order by xid, seq
      limit $4) e
left join vouched v on v.source = e.source and e.xid >= v.published_from and e.xid < v.published_below
cross join lateral (select e.sched_name = $1 and v.source is null as todo) t
order by e.xid, e.seq;

-- name: AdvanceCursor
update outbox_cursor set last_xid = $2::xid8, last_seq = $3 where sched_name = $1;

-- name: CursorLag
-- Seconds since the oldest event after the sweep cursor was logged, 0 when the sweep is caught
-- up: the time the first row after the cursor (events_relay, one index probe) has waited. No
-- row when the namespace has no cursor.
select coalesce(extract(epoch from clock_timestamp() - e.time), 0)::float8
from outbox_cursor c
left join lateral (
    select r.seq from events r
    where r.nats_subject is not null and (r.xid, r.seq) > (c.last_xid, c.last_seq)
    order by r.xid, r.seq
    limit 1) n on true
left join lateral (select x.time from events x where x.seq = n.seq limit 1) e on true
where c.sched_name = $1;
