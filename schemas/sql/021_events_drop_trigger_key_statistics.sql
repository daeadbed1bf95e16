-- The statistics on the trigger key in the log's data (events_trigger_key, migration 007; one a
-- partition since 009) are dropped. They were to tell the planner that a page of a trigger's
-- fires lies near the end of its job's events. On the partitioned log they did not: the job comes
-- from the trigger's TriggerScheduled, so the planner cannot tell how many events it has, and it
-- read and sorted all of a busy job's events for every page (40,000 for a page of 51). A history
-- now reads in index order (store.QueueIndexOrder), a backward scan that stops after the page
-- whatever the statistics say. What they cost: ANALYZE evaluates their expressions on every row
-- it samples (30,000), parsing each row's json several times: 1.1 s of CPU of the 1.4 s an
-- analyze of a partition of 900,000 events took. Autovacuum analyzes the day's partition each
-- time it has grown by a tenth, up to once a minute.
do $$
declare
    s record;
begin
    for s in select x.stxnamespace::regnamespace as nsp, x.stxname
             from pg_statistic_ext x join pg_inherits i on i.inhrelid = x.stxrelid
             where i.inhparent = 'events'::regclass and x.stxname like '%\_trigger\_key' loop
        execute format('drop statistics %I.%I', s.nsp, s.stxname);
    end loop;
end $$;

---- create above / drop below ----

do $$
declare
    p record;
begin
    for p in select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid
             where i.inhparent = 'events'::regclass loop
        execute format('create statistics if not exists %I on (data->''trigger''->>''group''), (data->''trigger''->>''name'') from %I',
                       p.relname || '_trigger_key', p.relname);
    end loop;
end $$;
