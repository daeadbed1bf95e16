-- name: LoadForFire
-- Key lists are looked up one key at a time through a LATERAL subquery that cannot be flattened
-- (LIMIT 1): a plain join lets a planner whose statistics lag behind a burst ("the namespace has
-- 33 triggers") hash the whole namespace instead (docs/performance.md, "Plans").
select t.trigger_group, t.trigger_name, t.state, t.next_fire_time, t.prev_fire_time, t.times_triggered,
       t.schedule, coalesce(t.calendar_name, ''), t.data, coalesce(t.trace_context, ''),
       j.job_type, j.data, j.timeout_ms, j.persist_data, t.ctid
from unnest($2::text[], $3::text[]) as c(g, n)
cross join lateral (select ctid, * from triggers t
                    where t.sched_name = $1 and t.trigger_group = c.g and t.trigger_name = c.n limit 1) t
cross join lateral (select * from job_details j
                    where j.sched_name = $1 and j.job_group = t.job_group and j.job_name = t.job_name limit 1) j;

-- name: UpdateTriggers
-- Guarded by the state and next fire time the claim was made on (funnyzpc/quartz's CAS). Each
-- row is reached by the ctid this transaction read it at (SelectDue or LoadForFire, under the
-- partition's lock), not by a second probe of the primary key: a TID scan, which the list behind
-- an InitPlan keeps (given the array itself, the planner prices 500 TIDs above reading the
-- namespace). No condition another index could serve: with sched_name = $1 the planner read the
-- namespace through the primary key instead. A row another transaction changed meanwhile has
-- moved: its update does not match, and the claim is dropped as when the guard fails.
-- A trigger with no fire left (new state COMPLETE) is deleted rather than updated: its
-- execution is in its fired row and JobFired. An update is a new row version with an entry in
-- each of the table's indexes, and the COMPLETE row was deleted again when the execution ended;
-- one delete costs a sixth of the two (docs/performance.md, "What one fire costs").
with u as (
    select * from unnest($1::tid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::int[],
                         $8::timestamptz[], $9::text[])
        as u(tid, g, n, state, next, prev, times, old_next, old_state)
), done as (
    delete from triggers t
    using u
    where t.ctid = any(array(select tid from u where u.state = 'COMPLETE')) and t.ctid = u.tid
      and t.trigger_group = u.g and t.trigger_name = u.n
      and t.state = u.old_state and t.next_fire_time = u.old_next
    returning t.trigger_group, t.trigger_name
), moved as (
    update triggers t
    set state = u.state, next_fire_time = u.next, prev_fire_time = u.prev, times_triggered = u.times
    from u
    where t.ctid = any(array(select tid from u where u.state <> 'COMPLETE')) and t.ctid = u.tid
      and t.trigger_group = u.g and t.trigger_name = u.n
      and t.state = u.old_state and t.next_fire_time = u.old_next
    returning t.trigger_group, t.trigger_name
)
select * from done
union all
select * from moved;

-- name: BlockOthers
-- Quartz: when a non-concurrent job fires, its other triggers wait until it completes.
-- Per job through triggers_job_key (OFFSET 0 keeps the subquery a per-key lookup, see LoadForFire;
-- job_key names the index's expression, the columns guard against a shared hash: migration 018).
update triggers t
set state = case t.state when 'PAUSED' then 'PAUSED_BLOCKED' else 'BLOCKED' end
from unnest($2::text[], $3::text[]) as j(g, n)
cross join lateral (select ctid as tid from triggers x
                    where job_key(x.sched_name, x.job_group, x.job_name) = job_key($1, j.g, j.n)
                      and x.sched_name = $1 and x.job_group = j.g and x.job_name = j.n offset 0) k
where t.ctid = k.tid and t.state in ('WAITING', 'ACQUIRED', 'PAUSED');

-- name: MarkExecuting
-- Keyed by fire id: a claim fires only while its own fired row is still ACQUIRED, and only while
-- the node that made it is a member under the epoch it made it in (epoch 0: a step run on its own).
update fired_triggers f set state = 'EXECUTING', fired_time = $2
where f.entry_id = any($1) and f.state = 'ACQUIRED'
  and (f.epoch = 0 or exists (select 1 from scheduler_state s
                              where s.sched_name = f.sched_name and s.instance_id = f.instance_id and s.epoch = f.epoch))
returning f.entry_id;

-- name: AlreadyFired
-- Claims whose fired row is EXECUTING already: an earlier attempt of theirs committed.
select entry_id from fired_triggers where entry_id = any($1) and state = 'EXECUTING';
