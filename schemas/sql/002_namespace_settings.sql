-- The lock settings of a namespace, stored once: nodes whose lock mode or partition count
-- differ would each lock a different set of rows and silently lose mutual exclusion, so a node
-- whose flags disagree with the nodes running refuses to start.
create table namespace_settings (
    sched_name text    primary key,
    lock_mode  text    not null, -- global | partitioned
    partitions integer not null  -- 1 in global mode
);

---- create above / drop below ----

drop table namespace_settings;
