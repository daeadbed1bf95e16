-- Agate's tables. Names follow Quartz's clustered JDBC JobStore (without the QRTZ_ prefix) so that
-- anyone who knows Quartz can read them; every table carries sched_name (the namespace).
-- Times are timestamptz throughout.

-- One row per lock name and namespace; "SELECT ... FOR UPDATE" on a row is the cluster lock
-- (Quartz's StdRowLockSemaphore). Rows are inserted by the scheduler at start.
create table locks (
    sched_name text not null,
    lock_name  text not null,
    primary key (sched_name, lock_name)
);

-- Cluster membership: each node checks in with the database clock.
create table scheduler_state (
    sched_name          text        not null,
    instance_id         text        not null,
    last_checkin_time   timestamptz not null,
    checkin_interval_ms bigint      not null,
    primary key (sched_name, instance_id)
);

create table job_details (
    sched_name        text    not null,
    job_group         text    not null,
    job_name          text    not null,
    job_type          text    not null,
    description       text,
    durable           boolean not null default false,
    nonconcurrent     boolean not null default false,
    requests_recovery boolean not null default false,
    timeout_ms        bigint,
    data              jsonb   not null default '{}',
    primary key (sched_name, job_group, job_name)
);

create table calendars (
    sched_name    text  not null,
    calendar_name text  not null,
    calendar      jsonb not null,
    primary key (sched_name, calendar_name)
);

create table triggers (
    sched_name     text        not null,
    trigger_group  text        not null,
    trigger_name   text        not null,
    job_group      text        not null,
    job_name       text        not null,
    kind           text        not null, -- simple | cron | calendar_interval | daily_time_interval
    schedule       jsonb       not null, -- the trigger.Definition; misfire handling may rewrite it
    start_time     timestamptz not null,
    end_time       timestamptz,
    calendar_name  text,
    priority       integer     not null default 5,
    misfire_instr  text        not null default 'smart_policy',
    next_fire_time timestamptz,
    prev_fire_time timestamptz,
    times_triggered integer    not null default 0,
    state          text        not null,
    partition      integer     not null default 0,
    trace_context  text,       -- W3C traceparent of the command that scheduled it
    data           jsonb       not null default '{}',
    primary key (sched_name, trigger_group, trigger_name),
    foreign key (sched_name, job_group, job_name) references job_details (sched_name, job_group, job_name)
);
-- Serves the acquire query: due WAITING triggers in fire-time, then priority order.
create index triggers_acquire on triggers (sched_name, next_fire_time, priority desc) where state = 'WAITING';
create index triggers_job on triggers (sched_name, job_group, job_name);

create table fired_triggers (
    sched_name        text        not null,
    entry_id          uuid        not null primary key, -- the fireId of JobFired
    trigger_group     text        not null,
    trigger_name      text        not null,
    job_group         text        not null,
    job_name          text        not null,
    instance_id       text        not null,
    fired_time        timestamptz not null,
    sched_time        timestamptz not null,
    state             text        not null, -- ACQUIRED | EXECUTING
    nonconcurrent     boolean     not null,
    requests_recovery boolean     not null,
    priority          integer     not null
);
create index fired_triggers_instance on fired_triggers (sched_name, instance_id);
create index fired_triggers_job on fired_triggers (sched_name, job_group, job_name);

create table paused_trigger_grps (
    sched_name    text not null,
    trigger_group text not null,
    primary key (sched_name, trigger_group)
);

-- The event log and the transactional outbox in one. xid fences the relay: a reader only takes
-- rows whose transaction is older than its snapshot's xmin, so a row whose seq was taken before a
-- slow transaction committed is never skipped (as watermill-sql's PostgreSQL adapter does).
create table events (
    seq           bigserial   primary key,
    xid           xid8        not null default pg_current_xact_id(),
    id            uuid        not null unique,
    sched_name    text        not null,
    type          text        not null,
    source        text        not null, -- CloudEvents source: agate/<ns>/<instance>
    aggregate     text        not null, -- job | trigger | command
    aggregate_id  text        not null, -- "<group>.<name>" or the command id
    nats_subject  text,                 -- where the relay publishes it; null: already on the bus
    time          timestamptz not null,
    data          jsonb       not null,
    trace_context text
);
create index events_relay on events (xid, seq) where nats_subject is not null;
create index events_aggregate on events (sched_name, aggregate, aggregate_id);

-- Where the outbox sweep has got to, per namespace.
create table outbox_cursor (
    sched_name text   primary key,
    last_xid   xid8   not null default '0',
    last_seq   bigint not null default 0
);

-- Idempotent command handling: a final outcome is remembered per command id.
create table commands_seen (
    sched_name text        not null,
    command_id text        not null,
    outcome    jsonb       not null,
    created_at timestamptz not null default now(),
    primary key (sched_name, command_id)
);

---- create above / drop below ----

drop table commands_seen, outbox_cursor, events, paused_trigger_grps, fired_triggers, triggers,
    calendars, job_details, scheduler_state, locks;
