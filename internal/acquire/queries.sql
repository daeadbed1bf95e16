-- name: SelectDue
-- Served by the partial index triggers_acquire (sched_name, next_fire_time, priority desc) where WAITING.
-- $6: the lock partitions the transaction holds; each row says its own. Then the columns of
-- internal/fire's LoadForFire (store.FireRow), so that the claims fired at once are not read twice.
-- Each claim's job is read by its primary key (LATERAL … LIMIT 1, see LoadForFire), and the
-- triggers in triggers_acquire's order (IndexOrder, before it in the same round trip): once
-- autovacuum had analyzed the table, its histogram of next_fire_time ended before now (fire
-- times only move forward), the planner took every trigger for due, and read the namespace's
-- triggers (by a sequential scan, or with that off by triggers_job), sorted them and hashed all
-- jobs at every pass: 5–20 ms a call for 5,000 triggers in a steady 5,000/s, against 0.3.
select t.trigger_group, t.trigger_name, t.job_group, t.job_name, t.next_fire_time, t.priority,
       j.nonconcurrent, j.requests_recovery, t.partition % $5,
       t.state, t.next_fire_time, t.prev_fire_time, t.times_triggered, t.schedule, coalesce(t.calendar_name, ''),
       t.data, coalesce(t.trace_context, ''), j.job_type, j.data, j.timeout_ms, j.persist_data
from (select * from triggers t
      where t.sched_name = $1
        and t.state = 'WAITING'
        and t.next_fire_time <= $2
        and (t.next_fire_time >= $3 or t.misfire_instr = 'ignore_misfire_policy')
        and t.partition % $5 = any($6::int[])
      order by t.next_fire_time, t.priority desc
      limit $4) t
cross join lateral (select * from job_details j
                    where j.sched_name = t.sched_name and j.job_group = t.job_group and j.job_name = t.job_name
                    limit 1) j
order by t.next_fire_time, t.priority desc;

-- name: IndexOrder
-- For SelectDue (see there): its only cheap plan is then triggers_acquire's order. Until the
-- end of the transaction, whose other statements probe keys or insert.
select set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true);

-- name: MarkAcquired
-- Key by key through the primary key, whatever the statistics (see internal/fire's LoadForFire).
with c as (
    select k.tid, u.nft
    from unnest($2::text[], $3::text[], $4::timestamptz[]) as u(g, n, nft)
    cross join lateral (select ctid as tid from triggers x
                        where x.sched_name = $1 and x.trigger_group = u.g and x.trigger_name = u.n limit 1) k
)
update triggers t set state = 'ACQUIRED'
from c
where t.ctid = any(array(select tid from c)) and t.ctid = c.tid
  and t.state = 'WAITING' and t.next_fire_time = c.nft
returning t.trigger_group, t.trigger_name;

-- name: NextWaiting
-- The first entry of triggers_acquire, NULL when none. Not min(next_fire_time): on a table not
-- analyzed since it grew, the planner took min() over every WAITING trigger of the namespace
-- (14 ms for 30,000 while commands came in) instead of the index's first entry.
select (select next_fire_time from triggers
        where sched_name = $1 and state = 'WAITING' and next_fire_time is not null
        order by next_fire_time
        limit 1);
