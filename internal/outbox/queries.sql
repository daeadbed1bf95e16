-- name: Append
-- One multi-row insert per batch of events (no round trip per row), and the transaction's row
-- in outbox_txs when it has events to publish ($11: the node that vouches for them, '' for
-- none). It returns the transaction's xid, which the node vouches for once JetStream stored the
-- events. The events a
-- node creates have new ids: a plain insert, without ON CONFLICT's speculative insertion (an
-- index probe and a confirmation WAL record per row). The seqs come a block of 4,096 per
-- nextval (migration 013: events_seq_bases reserves the blocks, events_seq_at numbers the rows).
with b as (select events_seq_bases(cardinality($2::uuid[])) as bases), ins as (
    insert into events (seq, id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context)
    select events_seq_at(b.bases, e.n), id, $1, type, source, aggregate, aggregate_id, nullif(nats_subject, ''), time, data::json,
           nullif(trace_context, '')
    from b, unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10::text[])
        with ordinality as e(id, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context, n)
), tx as (
    insert into outbox_txs (sched_name, xid, source, events, time, seq_from, seq_to)
    select $1, pg_current_xact_id(), $11, count(*), min(u.t), min(events_seq_at(b.bases, u.n)), max(events_seq_at(b.bases, u.n))
    from b, unnest($7::text[], $8::timestamptz[]) with ordinality u(s, t, n) where u.s <> ''
    having count(*) > 0
)
select pg_current_xact_id()::text::bigint;

-- name: AppendFromBus
-- Append, for a batch with events taken from the bus that the log may hold already (a
-- redelivered message brings them again; $11 marks them): those are skipped. The log is
-- partitioned, so no constraint keeps ids unique; the completion step, the one writer of events
-- from the bus, appends a job's outcomes under its partition lock, so two copies of one event are
-- never appended at once. Events from the bus are logged without a subject, and only a JobFailed
-- that did not end its execution is probed (an ending outcome goes through Append): the probe
-- looks among those alone, in the partial index events_bus_failed (migration 019), in every
-- partition.
with b as (select events_seq_bases(cardinality($2::uuid[])) as bases), ins as (
    insert into events (seq, id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context)
    select events_seq_at(b.bases, e.n), id, $1, type, source, aggregate, aggregate_id, nullif(nats_subject, ''), time, data::json,
           nullif(trace_context, '')
    from b, unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10::text[], $11::bool[])
        with ordinality as e(id, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context, probe, n)
    where not e.probe
       or not exists (select 1 from events x
                      where x.id = e.id and x.nats_subject is null and x.type = 'agate.job.failed' offset 0) -- a probe of events_bus_failed per id
), tx as (
    insert into outbox_txs (sched_name, xid, source, events, time, seq_from, seq_to)
    select $1, pg_current_xact_id(), $12, count(*), min(u.t), min(events_seq_at(b.bases, u.n)), max(events_seq_at(b.bases, u.n))
    from b, unnest($7::text[], $8::timestamptz[]) with ordinality u(s, t, n) where u.s <> ''
    having count(*) > 0
)
select pg_current_xact_id()::text::bigint;

-- name: LockCursor
-- One sweeper per namespace at a time; the others skip instead of queueing.
select last_xid::text, last_seq from outbox_cursor where sched_name = $1 for update skip locked;

-- name: SweepTxs
-- The transactions after the cursor in xid order (outbox_txs, one row each: the sweep no longer
-- walks the events of transactions it passes over), fenced below the oldest running transaction
-- so that one committing after a later one is never passed over. A transaction a live node
-- vouches for (its xid in the range the node's last check-in recorded: JetStream stored its
-- events) is only passed over: todo is false. The cursor's own transaction comes again
-- when the cursor stands inside it (the log's rows of a sweep before migration 014).
with vouched as (
    select 'agate/' || sched_name || '/' || instance_id as source, published_from, published_below
    from scheduler_state
    where sched_name = $1 and published_below is not null
)
select t.xid::text, t.events, v.source is null as todo, t.time, t.seq_from, t.seq_to
from (select xid, source, events, time, seq_from, seq_to
      from outbox_txs
      where sched_name = $1
        and (xid, 9223372036854775807::bigint) > ($2::xid8, $3::bigint)
        and xid < pg_snapshot_xmin(pg_current_snapshot())
      order by xid
      limit $4) t
left join vouched v on v.source = t.source and t.xid >= v.published_from and t.xid < v.published_below
order by t.xid;

-- name: SweepEvents
-- The events to publish of the transactions $1 (xids as text), each between the seqs $2 and $3
-- its outbox_txs row recorded, in log order, after the cursor ($4, $5): a range of the log's
-- primary key in each partition, in a LATERAL subquery per transaction (plans rule 1). A
-- transaction is one namespace's, so nothing filters on the namespace.
select e.xid::text, e.id, e.type, e.source, e.aggregate, e.aggregate_id, e.nats_subject, e.time, e.data,
       coalesce(e.trace_context, '')
from unnest($1::text[], $2::bigint[], $3::bigint[]) as t(xid, seq_from, seq_to)
cross join lateral (
    select * from events x
    where x.seq between t.seq_from and t.seq_to and x.xid = t.xid::xid8 and x.nats_subject is not null
    offset 0) e
where (e.xid, e.seq) > ($4::xid8, $5::bigint)
order by e.xid, e.seq;

-- name: ForgetTxs
-- The transactions the cursor has passed: their rows are no longer needed.
delete from outbox_txs where sched_name = $1 and xid <= $2::xid8;

-- name: AdvanceCursor
update outbox_cursor set last_xid = $2::xid8, last_seq = $3 where sched_name = $1;

-- name: CursorLag
-- Seconds since the oldest transaction after the sweep cursor logged its events, 0 when the sweep is
-- caught up: the time the first row after the cursor (outbox_txs, one index probe) has waited.
-- No row when the namespace has no cursor.
select coalesce(extract(epoch from clock_timestamp() - n.time), 0)::float8
from outbox_cursor c
left join lateral (
    select t.time from outbox_txs t
    where t.sched_name = c.sched_name and (t.xid, 9223372036854775807::bigint) > (c.last_xid, c.last_seq)
    order by t.xid
    limit 1) n on true
where c.sched_name = $1;
