-- name: Join
-- A node enters the cluster under a new epoch (a row left by an earlier run of this instance id
-- gets a new one too).
insert into scheduler_state (sched_name, instance_id, last_checkin_time, checkin_interval_ms, epoch)
values ($1, $2, now(), $3, nextval('scheduler_epoch'))
on conflict (sched_name, instance_id) do update
set last_checkin_time = now(), checkin_interval_ms = $3, epoch = nextval('scheduler_epoch')
returning epoch;

-- name: CheckIn
-- No row: the cluster declared this node failed (or another process took its instance id).
update scheduler_state set last_checkin_time = now(), checkin_interval_ms = $3
where sched_name = $1 and instance_id = $2 and epoch = $4;

-- name: FailedNodes
-- The database clock decides, so node clocks need not agree.
select instance_id from scheduler_state
where sched_name = $1 and instance_id <> $2
  and last_checkin_time + make_interval(secs => checkin_interval_ms * 2 / 1000.0) + interval '7.5 seconds' < now();

-- name: ForgetNodes
delete from scheduler_state where sched_name = $1 and instance_id = any($2) and instance_id <> $3;

-- name: SelectMisfired
select trigger_group, trigger_name, schedule, next_fire_time, prev_fire_time, times_triggered,
       coalesce(calendar_name, '')
from triggers
where sched_name = $1 and state = 'WAITING' and misfire_instr <> 'ignore_misfire_policy'
  and next_fire_time < $2 and partition % $4 = $5
order by next_fire_time
limit $3;

-- name: UpdateMisfired
update triggers
set next_fire_time = $4, prev_fire_time = $5, times_triggered = $6, schedule = $7,
    state = case when $4::timestamptz is null then 'COMPLETE' else state end
where sched_name = $1 and trigger_group = $2 and trigger_name = $3 and state = 'WAITING' and next_fire_time = $8;

-- name: Leave
delete from scheduler_state where sched_name = $1 and instance_id = $2;
