-- name: RememberOutcome
insert into commands_seen (sched_name, command_id, outcome) values ($1, $2, $3)
on conflict do nothing;

-- name: JobExists
select durable from job_details where sched_name = $1 and job_group = $2 and job_name = $3 for update;

-- name: UpsertJob
insert into job_details (sched_name, job_group, job_name, job_type, description, durable, nonconcurrent,
                         requests_recovery, timeout_ms, data, persist_data)
values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
on conflict (sched_name, job_group, job_name) do update
set job_type = excluded.job_type, description = excluded.description, durable = excluded.durable,
    nonconcurrent = excluded.nonconcurrent, requests_recovery = excluded.requests_recovery,
    timeout_ms = excluded.timeout_ms, data = excluded.data, persist_data = excluded.persist_data, version = job_details.version + 1;

-- name: TriggerOwner
select job_group, job_name from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3;

-- name: DeleteTrigger
delete from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3
returning job_group, job_name, version;

-- name: InsertTrigger
-- A new trigger starts in state $14 (WAITING), or as Quartz's storeTrigger decides: PAUSED when
-- its group ($2) is paused, or all are (the pause_all marker $19; its group is then recorded as
-- paused, so that resume_all resumes it); BLOCKED (PAUSED_BLOCKED) while its non-concurrent ($20)
-- job runs: it waits for the run in progress. Returns the state it got.
with paused as (
    select exists (select 1 from paused_trigger_grps where sched_name = $1 and trigger_group = $2) as own,
           exists (select 1 from paused_trigger_grps where sched_name = $1 and trigger_group = $19) as every
), recorded as (
    insert into paused_trigger_grps (sched_name, trigger_group)
    select $1, $2 from paused where every and not own
    on conflict do nothing
), initial as (
    select case when p.own or p.every then case when b.running then 'PAUSED_BLOCKED' else 'PAUSED' end
                when b.running then 'BLOCKED' else $14::text end as state
    from paused p,
         (select $20::bool and exists (select 1 from fired_triggers
                   where job_key(sched_name, job_group, job_name) = job_key($1, $4, $5)
                     and sched_name = $1 and job_group = $4 and job_name = $5 and state = 'EXECUTING') as running) b
)
insert into triggers (sched_name, trigger_group, trigger_name, job_group, job_name, kind, schedule, start_time,
                      end_time, calendar_name, priority, misfire_instr, next_fire_time, prev_fire_time,
                      times_triggered, state, trace_context, data, partition, version)
select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, null, 0, initial.state, $15, $16, $17, $18
from initial
returning state;

-- name: DeleteJobTriggers
-- A job's rows in triggers and fired_triggers are found through job_key (migration 018): it names
-- the index's expression, and the columns guard against a shared hash.
delete from triggers
where job_key(sched_name, job_group, job_name) = job_key($1, $2, $3) and sched_name = $1 and job_group = $2 and job_name = $3;

-- name: DeleteJob
delete from job_details where sched_name = $1 and job_group = $2 and job_name = $3;

-- name: DeleteOrphanJob
-- A non-durable job with no trigger left goes, unless an execution of it is in flight (its
-- trigger's last fire deleted the trigger): the end of that execution deletes it, as Quartz
-- keeps the job until its COMPLETE trigger's execution ends.
delete from job_details j
where j.sched_name = $1 and j.job_group = $2 and j.job_name = $3 and not j.durable
  and not exists (select 1 from triggers t
                  where job_key(t.sched_name, t.job_group, t.job_name) = job_key(j.sched_name, j.job_group, j.job_name)
                    and t.sched_name = j.sched_name and t.job_group = j.job_group and t.job_name = j.job_name)
  and not exists (select 1 from fired_triggers f
                  where job_key(f.sched_name, f.job_group, f.job_name) = job_key(j.sched_name, j.job_group, j.job_name)
                    and f.sched_name = j.sched_name and f.job_group = j.job_group and f.job_name = j.job_name
                    and f.state = 'EXECUTING');

-- name: UpsertCalendar
-- $4: replace an existing calendar of the same name. Returns nothing when it exists and $4 is false.
insert into calendars (sched_name, calendar_name, calendar) values ($1, $2, $3)
-- Returns whether it replaced one (xmax is set on a row the upsert updated).
on conflict (sched_name, calendar_name) do update set calendar = excluded.calendar, version = calendars.version + 1 where $4
returning xmax <> '0'::xid;

-- name: CalendarInUse
select count(*) from triggers where sched_name = $1 and calendar_name = $2;

-- name: DeleteCalendar
delete from calendars where sched_name = $1 and calendar_name = $2;

-- name: KeepRejectedBody
insert into rejected_bodies (sched_name, sha256, body) values ($1, $2, $3)
on conflict do nothing;

-- name: LoadJob
select job_type, nonconcurrent from job_details where sched_name = $1 and job_group = $2 and job_name = $3 for update;

-- name: TriggerExists
select exists (select 1 from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3);

-- name: PauseTrigger
-- Quartz's pauseTrigger: WAITING and ACQUIRED → PAUSED, BLOCKED → PAUSED_BLOCKED; other states
-- stay. Returns the state before and after (the self-join reads the row as it was).
update triggers t
set state = case t.state when 'WAITING' then 'PAUSED' when 'ACQUIRED' then 'PAUSED'
                         when 'BLOCKED' then 'PAUSED_BLOCKED' else t.state end,
    version = t.version + case when t.state in ('WAITING', 'ACQUIRED', 'BLOCKED') then 1 else 0 end
from triggers old
where t.sched_name = $1 and t.trigger_group = $2 and t.trigger_name = $3
  and old.sched_name = t.sched_name and old.trigger_group = t.trigger_group and old.trigger_name = t.trigger_name
returning old.state, t.state;

-- name: Resumable
-- The paused triggers to resume — trigger ($2, $3), or group $2 when $3 is null, or every group
-- when $2 is the pause_all marker $5 — with the state each resumes to (Quartz's
-- checkBlockedState: BLOCKED while its non-concurrent job runs) and whether it misfired while
-- paused (next fire time before $4 = now − misfire threshold). Columns as store.ScanTriggerTimes,
-- then those two.
select t.trigger_group, t.trigger_name, t.state, t.schedule, t.next_fire_time, t.prev_fire_time, t.times_triggered,
       coalesce(t.calendar_name, ''),
       case when j.nonconcurrent and exists (select 1 from fired_triggers f
                where job_key(f.sched_name, f.job_group, f.job_name) = job_key(t.sched_name, t.job_group, t.job_name)
                  and f.sched_name = t.sched_name and f.job_group = t.job_group and f.job_name = t.job_name
                  and f.state = 'EXECUTING') then 'BLOCKED' else 'WAITING' end,
       t.next_fire_time < $4 and t.misfire_instr <> 'ignore_misfire_policy'
from triggers t
join job_details j on j.sched_name = t.sched_name and j.job_group = t.job_group and j.job_name = t.job_name
where t.sched_name = $1 and ($2 = $5 or t.trigger_group = $2) and ($3::text is null or t.trigger_name = $3)
  and t.state in ('PAUSED', 'PAUSED_BLOCKED')
order by t.trigger_group, t.trigger_name
for update of t;

-- name: SetTriggerStates
-- Each trigger to its state, guarded by the state it was read in.
update triggers t set state = c.to_state, version = t.version + 1
from unnest($2::text[], $3::text[], $4::text[], $5::text[]) as c(g, n, from_state, to_state)
where t.sched_name = $1 and t.trigger_group = c.g and t.trigger_name = c.n and t.state = c.from_state;

-- name: PauseGroup
-- Quartz's pauseTriggerGroup, or pauseAll when $2 is the marker $3 (every group that has
-- triggers, and the marker, are recorded as paused). Returns how many triggers it paused.
with recorded as (
    insert into paused_trigger_grps (sched_name, trigger_group)
    select $1, $2
    union
    select distinct $1, trigger_group from triggers where sched_name = $1 and $2 = $3
    on conflict do nothing
), paused as (
    update triggers set state = case state when 'BLOCKED' then 'PAUSED_BLOCKED' else 'PAUSED' end, version = version + 1
    where sched_name = $1 and ($2 = $3 or trigger_group = $2) and state in ('WAITING', 'ACQUIRED', 'BLOCKED')
    returning 1
)
select count(*) from paused;

-- name: UnpauseGroup
-- Quartz's resumeTriggerGroup deletes the group's row; resumeAll ($2 = the marker $3) does so for
-- every group that has triggers, and deletes the marker. (A paused group without triggers stays
-- paused after resume_all, as in Quartz.)
delete from paused_trigger_grps p
where p.sched_name = $1
  and (p.trigger_group = $2
       or ($2 = $3 and exists (select 1 from triggers t where t.sched_name = $1 and t.trigger_group = p.trigger_group)));

-- name: CalendarTriggers
-- The triggers that use calendar $2 and may fire again; columns as store.ScanTriggerTimes.
select trigger_group, trigger_name, state, schedule, next_fire_time, prev_fire_time, times_triggered,
       coalesce(calendar_name, '')
from triggers
where sched_name = $1 and calendar_name = $2 and state not in ('COMPLETE', 'ERROR')
for update;

-- name: SetNextFireTimes
-- New next fire times after a calendar changed: none left → COMPLETE; a claim made ahead is
-- given up (ACQUIRED → WAITING), so the fire step drops it.
update triggers t
set next_fire_time = c.next, version = t.version + 1,
    state = case when c.next is null then 'COMPLETE' when t.state = 'ACQUIRED' then 'WAITING' else t.state end
from unnest($2::text[], $3::text[], $4::timestamptz[]) as c(g, n, next)
where t.sched_name = $1 and t.trigger_group = c.g and t.trigger_name = c.n;

-- name: JobVersion
select version from job_details where sched_name = $1 and job_group = $2 and job_name = $3 for update;

-- name: TriggerVersion
select version from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3 for update;

-- name: CalendarVersion
select version from calendars where sched_name = $1 and calendar_name = $2 for update;

-- name: JobExecutions
select count(*) from fired_triggers
where job_key(sched_name, job_group, job_name) = job_key($1, $2, $3) and sched_name = $1 and job_group = $2 and job_name = $3
  and state = 'EXECUTING';

-- name: FireExecuting
select job_group, job_name from fired_triggers where sched_name = $1 and entry_id = $2 and state = 'EXECUTING';

-- name: SeenOutcomes
-- Key by key through the primary key, as ExistingKeys.
select s.command_id, s.outcome
from unnest($2::text[]) as k(id)
cross join lateral (select command_id, outcome from commands_seen
                    where sched_name = $1 and command_id = k.id limit 1) s;

-- name: ExistingKeys
-- Which of the given job keys ($2, $3) and trigger keys ($4, $5) exist (bulk.go). Key by key
-- through the primary keys (LATERAL … LIMIT 1, see internal/fire's LoadForFire): as a semi-join
-- the planner could hash the whole namespace for every batch of commands.
select 'job', j.job_group, j.job_name
from unnest($2::text[], $3::text[]) as k(g, n)
cross join lateral (select job_group, job_name from job_details
                    where sched_name = $1 and job_group = k.g and job_name = k.n limit 1) j
union all
select 'trigger', t.trigger_group, t.trigger_name
from unnest($4::text[], $5::text[]) as k(g, n)
cross join lateral (select trigger_group, trigger_name from triggers
                    where sched_name = $1 and trigger_group = k.g and trigger_name = k.n limit 1) t;

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
