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

-- name: ExistingKeys
-- Which of the given job keys ($2, $3) and trigger keys ($4, $5) exist (bulk.go).
select 'job', job_group, job_name from job_details
where sched_name = $1 and (job_group, job_name) in (select * from unnest($2::text[], $3::text[]))
union all
select 'trigger', trigger_group, trigger_name from triggers
where sched_name = $1 and (trigger_group, trigger_name) in (select * from unnest($4::text[], $5::text[]));

-- name: BulkSchedule
-- schedule_job of new jobs with new triggers, in bulk (bulk.go): remembers each command's outcome
-- and, for the ids remembered (not taken by another transaction meanwhile), stores the job and
-- its triggers. Returns the ids remembered. Rows as UpsertJob and InsertTrigger store them.
with seen as (
    insert into commands_seen (sched_name, command_id, outcome)
    select $1, id, outcome::jsonb from unnest($2::text[], $3::text[]) as s(id, outcome)
    on conflict do nothing
    returning command_id),
jobs as (
    insert into job_details (sched_name, job_group, job_name, job_type, description, durable, nonconcurrent,
                             requests_recovery, timeout_ms, data)
    select $1, g, n, ty, d, du, nc, rr, tm, da::jsonb
    from unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bool[], $10::bool[], $11::bool[],
                $12::int8[], $13::text[]) as j(cid, g, n, ty, d, du, nc, rr, tm, da)
    where cid in (select command_id from seen)
    returning 1),
trigs as (
    insert into triggers (sched_name, trigger_group, trigger_name, job_group, job_name, kind, schedule, start_time,
                          end_time, calendar_name, priority, misfire_instr, next_fire_time, prev_fire_time,
                          times_triggered, state, trace_context, data, partition)
    select $1, tg, tn, jg, jn, k, sc::jsonb, st, et, cal, pr, mi, nf, null, 0, s, tc, da::jsonb, p
    from unnest($14::text[], $15::text[], $16::text[], $17::text[], $18::text[], $19::text[], $20::text[],
                $21::timestamptz[], $22::timestamptz[], $23::text[], $24::int4[], $25::text[], $26::timestamptz[],
                $27::text[], $28::text[], $29::text[], $30::int4[])
         as t(cid, tg, tn, jg, jn, k, sc, st, et, cal, pr, mi, nf, s, tc, da, p)
    where cid in (select command_id from seen)
    returning 1)
select command_id from seen;
