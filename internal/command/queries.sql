-- name: RememberOutcome
insert into commands_seen (sched_name, command_id, outcome) values ($1, $2, $3)
on conflict do nothing;

-- name: JobExists
select durable from job_details where sched_name = $1 and job_group = $2 and job_name = $3 for update;

-- name: UpsertJob
insert into job_details (sched_name, job_group, job_name, job_type, description, durable, nonconcurrent,
                         requests_recovery, timeout_ms, data)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
on conflict (sched_name, job_group, job_name) do update
set job_type = excluded.job_type, description = excluded.description, durable = excluded.durable,
    nonconcurrent = excluded.nonconcurrent, requests_recovery = excluded.requests_recovery,
    timeout_ms = excluded.timeout_ms, data = excluded.data;

-- name: TriggerOwner
select job_group, job_name from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3;

-- name: JobExecuting
select exists (select 1 from fired_triggers
               where sched_name = $1 and job_group = $2 and job_name = $3 and state = 'EXECUTING');

-- name: DeleteTrigger
delete from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3
returning job_group, job_name;

-- name: InsertTrigger
insert into triggers (sched_name, trigger_group, trigger_name, job_group, job_name, kind, schedule, start_time,
                      end_time, calendar_name, priority, misfire_instr, next_fire_time, prev_fire_time,
                      times_triggered, state, trace_context, data, partition)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, null, 0, $14, $15, $16, $17);

-- name: DeleteJobTriggers
delete from triggers where sched_name = $1 and job_group = $2 and job_name = $3;

-- name: DeleteJob
delete from job_details where sched_name = $1 and job_group = $2 and job_name = $3;

-- name: DeleteOrphanJob
delete from job_details j
where j.sched_name = $1 and j.job_group = $2 and j.job_name = $3 and not j.durable
  and not exists (select 1 from triggers t
                  where t.sched_name = j.sched_name and t.job_group = j.job_group and t.job_name = j.job_name);

-- name: UpsertCalendar
-- $4: replace an existing calendar of the same name. Returns nothing when it exists and $4 is false.
insert into calendars (sched_name, calendar_name, calendar) values ($1, $2, $3)
on conflict (sched_name, calendar_name) do update set calendar = excluded.calendar where $4
returning 1;

-- name: CalendarInUse
select count(*) from triggers where sched_name = $1 and calendar_name = $2;

-- name: DeleteCalendar
delete from calendars where sched_name = $1 and calendar_name = $2;

-- name: KeepRejectedBody
insert into rejected_bodies (sched_name, sha256, body) values ($1, $2, $3)
on conflict do nothing;

-- name: SeenOutcomes
select command_id, outcome from commands_seen where sched_name = $1 and command_id = any($2);
