-- name: Lock
-- Quartz's StdRowLockSemaphore: the row lock is held until the transaction ends.
select 1 from locks where sched_name = $1 and lock_name = $2 for update;

-- name: EnsureLock
insert into locks (sched_name, lock_name) values ($1, $2) on conflict do nothing;

-- name: LockShared
-- Locks.NewJobs: the paused-groups row shared. The paused groups are read by the next statement:
-- one that waited for the row reads the groups as they were when it started, before the wait.
select 1 from locks where sched_name = $1 and lock_name = $2 for share;

-- name: AnyGroupPaused
select exists (select 1 from paused_trigger_grps where sched_name = $1);

-- name: TryLocks
-- The lock rows named in $2 that no other transaction holds, in one statement: SKIP LOCKED never
-- waits, so the order they are taken in cannot deadlock (the statements that wait take theirs in
-- ascending order, one at a time).
select lock_name from locks where sched_name = $1 and lock_name = any($2::text[]) for update skip locked;

-- name: EnsureOutboxCursor
insert into outbox_cursor (sched_name) values ($1) on conflict do nothing;

-- name: InsertFired
insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name,
    instance_id, fired_time, sched_time, state, nonconcurrent, requests_recovery, priority, epoch)
select $1, id, tg, tn, jg, jn, $2, $3, st, $4, nc, rr, pr, ep
from unnest($5::uuid[], $6::text[], $7::text[], $8::text[], $9::text[], $10::timestamptz[],
    $11::bool[], $12::bool[], $13::int[], $14::bigint[]) as c(id, tg, tn, jg, jn, st, nc, rr, pr, ep);

-- name: DeleteFired
delete from fired_triggers where entry_id = any($1);

-- name: LoadCalendars
select calendar_name, calendar from calendars where sched_name = $1 and calendar_name = any($2);

-- name: ReleaseClaims
-- Claims given back unfired (shutdown, a failed fire transaction, a dead node), chosen by fire
-- id ($2) or by the node that made them ($3).
with gone as (
    delete from fired_triggers
    where sched_name = $1 and state = 'ACQUIRED' and (entry_id = any($2) or instance_id = any($3))
    returning trigger_group, trigger_name, sched_time
)
update triggers t set state = 'WAITING'
from gone
where t.sched_name = $1 and t.trigger_group = gone.trigger_group and t.trigger_name = gone.trigger_name
  and t.state = 'ACQUIRED' and t.next_fire_time = gone.sched_time
returning t.trigger_group, t.trigger_name;

-- name: SetTriggerError
-- Quartz's ERROR state: a trigger whose schedule can no longer be computed stops firing, so it
-- cannot stall its partition, until an operator replaces it.
update triggers t set state = 'ERROR'
from unnest($2::text[], $3::text[]) as c(g, n)
cross join lateral (select ctid as tid from triggers x
                    where x.sched_name = $1 and x.trigger_group = c.g and x.trigger_name = c.n limit 1) k
where t.ctid = k.tid
returning t.trigger_group, t.trigger_name;

-- name: InsertSettings
insert into namespace_settings (sched_name, lock_mode, partitions) values ($1, $2, $3)
on conflict (sched_name) do nothing;

-- name: ReadSettings
select lock_mode, partitions from namespace_settings where sched_name = $1 for update;

-- name: UpdateSettings
update namespace_settings set lock_mode = $2, partitions = $3 where sched_name = $1;

-- name: LiveNodes
-- Nodes other than $2 that recovery would not yet consider failed.
select instance_id from scheduler_state
where sched_name = $1 and instance_id <> $2
  and last_checkin_time + make_interval(secs => checkin_interval_ms * 2 / 1000.0) + interval '7.5 seconds' >= now();

-- name: MemberEpoch
-- The epoch of a node's membership row, read at the start of a transaction that claims or fires.
-- FOR KEY SHARE keeps the cluster from declaring the node failed (a DELETE) and a new run of its
-- instance id from joining (Join takes the row FOR UPDATE) until the transaction ends, and lets
-- the node's check-in (an UPDATE of no key column) through: under FOR SHARE a check-in waited
-- behind every fire and completion transaction, 155 ms a check-in in a burst.
select epoch from scheduler_state where sched_name = $1 and instance_id = $2 for key share;

-- Ending an execution (EndExecutions).

-- name: EndFired
delete from fired_triggers
where entry_id = any($1)
returning entry_id, trigger_group, trigger_name, job_group, job_name, nonconcurrent;

-- name: EndRepeatingFired
-- The executions of concurrent jobs whose trigger is there and fires again: ending one deletes
-- its fired row and nothing else, so it needs no partition lock (EndRepeating). A trigger's last
-- fire deletes it, and a trigger of the same name scheduled since may be another job's: the
-- trigger must still be the execution's job's, or the job may be left to delete. OFFSET 0 keeps
-- EXISTS a probe of the trigger's primary key per row rather than a semi-join.
delete from fired_triggers f
where f.entry_id = any($1) and not f.nonconcurrent
  and exists (select 1 from triggers t
              where t.sched_name = f.sched_name and t.trigger_group = f.trigger_group
                and t.trigger_name = f.trigger_name and t.state <> 'COMPLETE'
                and t.job_group = f.job_group and t.job_name = f.job_name offset 0)
returning f.entry_id, f.trigger_group, f.trigger_name, f.job_group, f.job_name, f.nonconcurrent;

-- name: ReleaseBlocked
-- Quartz: when a non-concurrent job's execution ends, its blocked triggers may fire again.
-- Key lists in this file are looked up key by key (LATERAL subqueries that cannot be flattened,
-- then a join on ctid), whatever the statistics: see internal/fire's LoadForFire.
update triggers t
set state = case t.state when 'PAUSED_BLOCKED' then 'PAUSED' else 'WAITING' end
from unnest($2::text[], $3::text[]) as j(g, n)
cross join lateral (select ctid as tid from triggers x
                    where job_key(x.sched_name, x.job_group, x.job_name) = job_key($1, j.g, j.n)
                      and x.sched_name = $1 and x.job_group = j.g and x.job_name = j.n offset 0) k
where t.ctid = k.tid and t.state in ('BLOCKED', 'PAUSED_BLOCKED')
returning t.trigger_group, t.trigger_name;

-- name: DeleteFinishedJobs
-- A non-durable job with no trigger left and no other execution in flight goes (Quartz's
-- removeTrigger). OFFSET 0 keeps each NOT EXISTS a per-job probe of triggers_job_key and
-- fired_triggers_job_key rather than an anti-join that may hash the namespace's rows (job_key:
-- migration 018).
delete from job_details j
using unnest($2::text[], $3::text[]) as c(g, n)
cross join lateral (select ctid as tid from job_details x
                    where x.sched_name = $1 and x.job_group = c.g and x.job_name = c.n limit 1) k
where j.ctid = k.tid and not j.durable
  and not exists (select 1 from triggers t
                  where job_key(t.sched_name, t.job_group, t.job_name) = job_key(j.sched_name, j.job_group, j.job_name)
                    and t.sched_name = j.sched_name and t.job_group = j.job_group and t.job_name = j.job_name offset 0)
  and not exists (select 1 from fired_triggers f
                  where job_key(f.sched_name, f.job_group, f.job_name) = job_key(j.sched_name, j.job_group, j.job_name)
                    and f.sched_name = j.sched_name and f.job_group = j.job_group and f.job_name = j.job_name
                    and f.state = 'EXECUTING' offset 0)
returning j.job_group, j.job_name;

-- name: UpdateMisfired
-- A misfired trigger's new schedule and fire times, guarded by the state ($9) and next fire time
-- ($8) it was read with; it goes to state $10 (COMPLETE when it will not fire again).
update triggers
set next_fire_time = $4, prev_fire_time = $5, times_triggered = $6, schedule = $7, version = version + 1,
    state = $10
where sched_name = $1 and trigger_group = $2 and trigger_name = $3 and state = $9 and next_fire_time = $8;

-- name: IndexOrder
-- InIndexOrder, InHotTx: until the end of the transaction, sequential scans, bitmap scans and sorts
-- cost the planner more than any index scan. And no JIT compilation: a plan that keeps a node
-- so priced (a sort of a page of rows) costs more than jit_above_cost, and compiling it took
-- 3.3 s where the statement runs in 2 ms (TestJobEventLookupsReadAPageOfABusyJob).
select set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true), set_config('jit', 'off', true);
