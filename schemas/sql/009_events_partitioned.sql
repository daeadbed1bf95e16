-- The log, partitioned by day so that retention drops whole partitions (DETACH ... CONCURRENTLY,
-- which never blocks inserts) instead of deleting rows. The partition key is recorded_at, the
-- database's clock when the row was written, not the event's time: a worker's clock may be
-- anywhere, and a row must always find its partition. Nodes create the partitions of the next
-- days ahead (internal/retention); the migration creates the first ones.
--
-- A unique index on a partitioned table must include the partition key, so the event id is no
-- longer unique by constraint: the completion step, the one writer of events that come from the
-- bus (and so may arrive twice), checks that the id is absent under its partition locks.
alter table events rename to events_unpartitioned;
alter index events_pkey rename to events_unpartitioned_pkey;
alter index events_id_key rename to events_unpartitioned_id_key;
alter index events_relay rename to events_unpartitioned_relay;
alter index events_aggregate_seq rename to events_unpartitioned_aggregate_seq;
drop statistics events_trigger_key;
alter sequence events_seq_seq owned by none;

create table events (
    seq           bigint      not null default nextval('events_seq_seq'),
    xid           xid8        not null default pg_current_xact_id(),
    id            uuid        not null,
    sched_name    text        not null,
    type          text        not null,
    source        text        not null,
    aggregate     text        not null,
    aggregate_id  text        not null,
    nats_subject  text,
    time          timestamptz not null,
    data          jsonb       not null,
    trace_context text,
    recorded_at   timestamptz not null default now(),
    primary key (seq, recorded_at)
) partition by range (recorded_at);
alter sequence events_seq_seq owned by events.seq;
create index events_relay on events (xid, seq) where nats_subject is not null;
create index events_aggregate_seq on events (sched_name, aggregate, aggregate_id, seq);
create index events_id on events (id);

-- The rows logged so far go to one partition that ends at the start of today; today's and the
-- next days' partitions follow, named events_pYYYYMMDD as internal/retention names them.
create table events_before_partitioning partition of events
    for values from (minvalue) to (date_trunc('day', now() at time zone 'UTC') at time zone 'UTC');
insert into events (seq, xid, id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data,
                    trace_context, recorded_at)
select seq, xid, id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data, trace_context,
       date_trunc('day', now() at time zone 'UTC') at time zone 'UTC' - interval '1 microsecond'
from events_unpartitioned;
drop table events_unpartitioned;

-- Each partition gets the statistics migration 007 gave the log (history queries filter a job's
-- events on the trigger key in their data), as internal/retention does for the partitions it
-- creates.
create statistics events_before_partitioning_trigger_key
    on (data->'trigger'->>'group'), (data->'trigger'->>'name') from events_before_partitioning;
do $$
declare
    d date;
    p text;
begin
    for i in 0..7 loop
        d := (now() at time zone 'UTC')::date + i;
        p := 'events_p' || to_char(d, 'YYYYMMDD');
        execute format('create table %I partition of events for values from (%L) to (%L)',
                       p, d::timestamp at time zone 'UTC', (d + 1)::timestamp at time zone 'UTC');
        execute format('create statistics %I on (data->''trigger''->>''group''), (data->''trigger''->>''name'') from %I',
                       p || '_trigger_key', p);
    end loop;
end $$;

-- Snapshots of the log's projection (internal/replay): the state after every event whose
-- transaction id is below fence, gzip-compressed JSON. Replay starts from the latest one, so
-- partitions older than it can be dropped.
create table event_snapshots (
    sched_name text        not null,
    fence      xid8        not null,
    taken_at   timestamptz not null default now(),
    events     bigint      not null, -- events applied to the previous snapshot to make this one
    state      bytea       not null,
    primary key (sched_name, fence)
);

---- create above / drop below ----

drop table event_snapshots;
alter table events rename to events_partitioned;
alter index events_pkey rename to events_partitioned_pkey; -- or the new table's would be events_pkey1, which 009 does not rename going up again
alter index events_relay rename to events_partitioned_relay;
alter index events_aggregate_seq rename to events_partitioned_aggregate_seq;
alter sequence events_seq_seq owned by none;
create table events (
    seq           bigint      primary key default nextval('events_seq_seq'),
    xid           xid8        not null default pg_current_xact_id(),
    id            uuid        not null unique,
    sched_name    text        not null,
    type          text        not null,
    source        text        not null,
    aggregate     text        not null,
    aggregate_id  text        not null,
    nats_subject  text,
    time          timestamptz not null,
    data          jsonb       not null,
    trace_context text
);
insert into events select seq, xid, id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data,
                          trace_context from events_partitioned;
drop table events_partitioned;
alter sequence events_seq_seq owned by events.seq;
create index events_relay on events (xid, seq) where nats_subject is not null;
create index events_aggregate_seq on events (sched_name, aggregate, aggregate_id, seq);
create statistics events_trigger_key on (data->'trigger'->>'group'), (data->'trigger'->>'name') from events;
