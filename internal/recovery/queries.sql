-- name: LockMembership
-- Join's first statement: it waits for the transactions of an earlier run with this instance id
-- that still hold the row (store's MemberEpoch, FOR KEY SHARE, which the upsert's update of no
-- key column would not wait for), so that none of them fires after this run gave its claims back.
select 1 from scheduler_state where sched_name = $1 and instance_id = $2 for update;

-- name: Join
-- A node enters the cluster under a new epoch (a row left by an earlier run of this instance id
-- gets a new one too). It vouches for no published event yet, and later only for events of
-- transactions after this one: an earlier run's leftovers are the sweep's.
insert into scheduler_state (sched_name, instance_id, last_checkin_time, checkin_interval_ms, epoch, published_from)
values ($1, $2, now(), $3, nextval('scheduler_epoch'), pg_current_xact_id())
on conflict (sched_name, instance_id) do update
set last_checkin_time = now(), checkin_interval_ms = $3, epoch = nextval('scheduler_epoch'),
    published_from = pg_current_xact_id(), published_below = null
returning epoch;

-- name: CheckIn
-- No row: the cluster declared this node failed (or another process took its instance id).
-- $5: the node's events of transactions below this xid are in JetStream (outbox.PublishedBelow);
-- greatest() because the heartbeat and the recovery pass check in concurrently. It returns its
-- own xid and the sweep cursor's, which move the node's next PublishedBelow on.
update scheduler_state
set last_checkin_time = now(), checkin_interval_ms = $3,
    published_below = greatest(published_below, $5::text::xid8)
where sched_name = $1 and instance_id = $2 and epoch = $4
returning pg_current_xact_id()::text::bigint,
          coalesce((select last_xid::text::bigint from outbox_cursor where sched_name = $1), 0);

-- name: FailedNodes
-- The database clock decides, so node clocks need not agree.
select instance_id from scheduler_state
where sched_name = $1 and instance_id <> $2
  and last_checkin_time + make_interval(secs => checkin_interval_ms * 2 / 1000.0) + interval '7.5 seconds' < now();

-- name: ForgetNodes
delete from scheduler_state where sched_name = $1 and instance_id = any($2) and instance_id <> $3;

-- name: SelectMisfired
select trigger_group, trigger_name, state, schedule, next_fire_time, prev_fire_time, times_triggered,
       coalesce(calendar_name, '')
from triggers
where sched_name = $1 and state = 'WAITING' and misfire_instr <> 'ignore_misfire_policy'
  and next_fire_time < $2 and partition % $4 = $5
order by next_fire_time
limit $3;

-- name: Leave
delete from scheduler_state where sched_name = $1 and instance_id = $2;

-- name: HealBlocked
-- Blocked by a non-concurrent job's execution, but the job has none in flight (no fired row).
-- Returns the state each was in (RETURNING gives the new row: PAUSED was PAUSED_BLOCKED).
update triggers t
set state = case t.state when 'PAUSED_BLOCKED' then 'PAUSED' else 'WAITING' end
where t.sched_name = $1 and t.state in ('BLOCKED', 'PAUSED_BLOCKED')
  and not exists (select 1 from fired_triggers f
                  where job_key(f.sched_name, f.job_group, f.job_name) = job_key(t.sched_name, t.job_group, t.job_name)
                    and f.sched_name = t.sched_name and f.job_group = t.job_group and f.job_name = t.job_name)
returning t.trigger_group, t.trigger_name, case t.state when 'PAUSED' then 'PAUSED_BLOCKED' else 'BLOCKED' end;

-- name: ForgetOrphanClaims
-- Claims (ACQUIRED fired rows) of nodes that are no longer members: nobody will fire them.
delete from fired_triggers f
where f.sched_name = $1 and f.state = 'ACQUIRED'
  and not exists (select 1 from scheduler_state s where s.sched_name = f.sched_name and s.instance_id = f.instance_id);

-- name: HealAcquired
-- Claimed, but no live node holds a claim on it (no ACQUIRED fired row of a member).
update triggers t set state = 'WAITING'
where t.sched_name = $1 and t.state = 'ACQUIRED'
  and not exists (select 1 from fired_triggers f
                  join scheduler_state s on s.sched_name = f.sched_name and s.instance_id = f.instance_id
                  where f.sched_name = t.sched_name and f.trigger_group = t.trigger_group
                    and f.trigger_name = t.trigger_name and f.state = 'ACQUIRED')
returning t.trigger_group, t.trigger_name, 'ACQUIRED';

-- name: HealComplete
-- Will not fire again, and its last execution has ended: it should have been deleted.
delete from triggers t
where t.sched_name = $1 and t.state = 'COMPLETE'
  and not exists (select 1 from fired_triggers f
                  where f.sched_name = t.sched_name and f.trigger_group = t.trigger_group and f.trigger_name = t.trigger_name)
returning t.trigger_group, t.trigger_name, 'COMPLETE';

-- name: DeleteOrphanJobs
-- Non-durable jobs left without triggers go (Quartz's removeTrigger).
delete from job_details j
where j.sched_name = $1 and not j.durable
  and not exists (select 1 from triggers t
                  where job_key(t.sched_name, t.job_group, t.job_name) = job_key(j.sched_name, j.job_group, j.job_name)
                    and t.sched_name = j.sched_name and t.job_group = j.job_group and t.job_name = j.job_name)
  and not exists (select 1 from fired_triggers f
                  where job_key(f.sched_name, f.job_group, f.job_name) = job_key(j.sched_name, j.job_group, j.job_name)
                    and f.sched_name = j.sched_name and f.job_group = j.job_group and f.job_name = j.job_name)
returning j.job_group, j.job_name;

-- name: AnyStuck
-- The healing scan's look without locks: is any trigger stuck as HealBlocked, HealAcquired or
-- HealComplete would find it? Set differences, one per kind of key, cost one pass over each
-- table whatever the statistics say; a NOT EXISTS whose condition depends on the row's state
-- cannot become an anti-join and rescans fired_triggers per trigger (minutes on a burst).
select exists (
    select t.job_group, t.job_name from triggers t
    where t.sched_name = $1 and t.state in ('BLOCKED', 'PAUSED_BLOCKED')
    except
    select f.job_group, f.job_name from fired_triggers f where f.sched_name = $1
) or exists (
    select t.trigger_group, t.trigger_name from triggers t
    where t.sched_name = $1 and t.state in ('ACQUIRED', 'COMPLETE')
    except
    select f.trigger_group, f.trigger_name from fired_triggers f where f.sched_name = $1
);

-- name: Overdue
-- Executions with no outcome long after their fire: $2 attempts of the job's timeout (or $3 ms)
-- plus $4 ms of grace. The JobFired they were last fired with comes from the log, with whether
-- the outbox sweep has passed it (so it is on the bus). fired_triggers holds only executions
-- in flight, so the scan stays small; but a burst leaves tens of thousands in flight at once,
-- and probing each one's job for its timeout took 190 ms a scan (20,000, measured alone) on
-- every node. No deadline comes before fired_time + $4 (timeouts are positive), so that bound,
-- checked on the fired row alone, leaves the probes to executions already past it.
select f.entry_id, f.job_group, f.job_name, f.requests_recovery, f.recovering,
       e.data, coalesce(e.trace_context, ''), coalesce(e.nats_subject, ''),
       (e.xid, e.seq) <= (c.last_xid, c.last_seq)
from fired_triggers f
left join job_details j on j.sched_name = f.sched_name and j.job_group = f.job_group and j.job_name = f.job_name
join outbox_cursor c on c.sched_name = f.sched_name
cross join lateral (
    select e.data, e.trace_context, e.nats_subject, e.xid, e.seq from events e
    where events_aggregate_key(e.sched_name, e.aggregate, e.aggregate_id) = events_aggregate_key(f.sched_name, 'job', f.job_group || '.' || f.job_name)
      and e.sched_name = f.sched_name and e.aggregate = 'job' and e.aggregate_id = f.job_group || '.' || f.job_name
      and e.type = 'agate.job.fired' and e.data->>'fireId' = f.entry_id::text
    order by e.seq desc limit 1) e
where f.sched_name = $1 and f.state = 'EXECUTING'
  and f.fired_time < now() - make_interval(secs => $4 / 1000.0)
  and f.fired_time + make_interval(secs => ($2 * coalesce(j.timeout_ms, $3) + $4) / 1000.0) < now()
order by f.fired_time
limit $5;

-- name: Refire
-- The execution is fired again: its deadline starts over (at the time its JobFired says), and
-- the next time it is abandoned.
update fired_triggers set recovering = true, fired_time = $2
where entry_id = $1 and state = 'EXECUTING' and not recovering;
