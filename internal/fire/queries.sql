-- name: LoadForFire
select t.trigger_group, t.trigger_name, t.state, t.next_fire_time, t.prev_fire_time, t.times_triggered,
       t.schedule, coalesce(t.calendar_name, ''), t.data, coalesce(t.trace_context, ''),
       j.job_type, j.data, j.timeout_ms, j.persist_data
from unnest($2::text[], $3::text[]) as c(g, n)
join triggers t on t.sched_name = $1 and t.trigger_group = c.g and t.trigger_name = c.n
join job_details j on j.sched_name = t.sched_name and j.job_group = t.job_group and j.job_name = t.job_name;

-- name: UpdateTriggers
-- Guarded by the state and next fire time the claim was made on (funnyzpc/quartz's CAS). The
-- expected state comes per row from the key list rather than as a constant: a constant lets the
-- planner trust statistics that lag behind a burst ("no trigger is ACQUIRED") and scan the whole
-- namespace once per key; as a join column, the key list drives primary-key lookups.
update triggers t
set state = c.state, next_fire_time = c.next, prev_fire_time = c.prev, times_triggered = c.times
from unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::int[], $8::timestamptz[], $9::text[])
    as c(g, n, state, next, prev, times, old_next, old_state)
where t.sched_name = $1 and t.trigger_group = c.g and t.trigger_name = c.n
  and t.state = c.old_state and t.next_fire_time = c.old_next
returning t.trigger_group, t.trigger_name;

-- name: BlockOthers
-- Quartz: when a non-concurrent job fires, its other triggers wait until it completes.
update triggers t
set state = case t.state when 'PAUSED' then 'PAUSED_BLOCKED' else 'BLOCKED' end
from unnest($2::text[], $3::text[]) as j(g, n)
where t.sched_name = $1 and t.job_group = j.g and t.job_name = j.n
  and t.state in ('WAITING', 'ACQUIRED', 'PAUSED');

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
