-- name: SelectDue
-- Served by the partial index triggers_acquire (sched_name, next_fire_time, priority desc) where WAITING.
-- $6: the lock partitions the transaction holds; each row says its own. Then the columns of
-- internal/fire's LoadForFire (store.FireRow), so that the claims fired at once are not read twice.
-- Each claim's job is read by its primary key (LATERAL … LIMIT 1, see LoadForFire), and the
-- triggers in triggers_acquire's order (the index order of its transaction, store.InHotTx): once
-- autovacuum had analyzed the table, its histogram of next_fire_time ended before now (fire
-- times only move forward), the planner took every trigger for due, and read the namespace's
-- triggers (by a sequential scan, or with that off by triggers_job), sorted them and hashed all
-- jobs at every pass: 5–20 ms a call for 5,000 triggers in a steady 5,000/s, against 0.3.
select t.trigger_group, t.trigger_name, t.job_group, t.job_name, t.next_fire_time, t.priority,
       j.nonconcurrent, j.requests_recovery, t.partition % $5,
       t.state, t.next_fire_time, t.prev_fire_time, t.times_triggered, t.schedule, coalesce(t.calendar_name, ''),
       t.data, coalesce(t.trace_context, ''), j.job_type, j.data, j.timeout_ms, j.persist_data, t.ctid
from (select ctid, * from triggers t
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

-- name: MarkAcquired
-- By the ctid SelectDue read each trigger at in this transaction (see internal/fire's
-- UpdateTriggers), guarded by the state ($5, WAITING for each) and next fire time it was read
-- with. The state comes with each row, not as a constant: state = 'WAITING' would let the planner
-- read the namespace through the partial index triggers_acquire instead.
with u as (
    select * from unnest($1::tid[], $2::text[], $3::text[], $4::timestamptz[], $5::text[]) as u(tid, g, n, nft, expect)
)
update triggers t set state = 'ACQUIRED'
from u
where t.ctid = any(array(select tid from u)) and t.ctid = u.tid
  and t.trigger_group = u.g and t.trigger_name = u.n
  and t.state = u.expect and t.next_fire_time = u.nft
returning t.trigger_group, t.trigger_name;

-- name: NextWaiting
-- The first entry of triggers_acquire, NULL when none. Not min(next_fire_time): on a table not
-- analyzed since it grew, the planner took min() over every WAITING trigger of the namespace
-- (14 ms for 30,000 while commands came in) instead of the index's first entry.
select (select next_fire_time from triggers
        where sched_name = $1 and state = 'WAITING' and next_fire_time is not null
        order by next_fire_time
        limit 1);
