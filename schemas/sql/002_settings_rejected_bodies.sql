-- The lock settings of a namespace, stored once: nodes whose lock mode or partition count
-- differ would each lock a different set of rows and silently lose mutual exclusion, so a node
-- whose flags disagree with the nodes running refuses to start.
create table namespace_settings (
    sched_name text    primary key,
    lock_mode  text    not null, -- global | partitioned
    partitions integer not null  -- 1 in global mode
);

-- The bodies of rejected commands, kept in the database only: the CommandRejected event, which
-- other producers may read on NATS, carries a body's size and SHA-256, not the body. bytea holds
-- any bytes, NUL included.
create table rejected_bodies (
    sched_name  text        not null,
    sha256      bytea       not null,
    body        bytea       not null,
    received_at timestamptz not null default now(),
    primary key (sched_name, sha256)
);

---- create above / drop below ----

drop table rejected_bodies, namespace_settings;
