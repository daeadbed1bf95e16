-- Read-only statements of the queries. Paged lists walk an index in key order from a cursor
-- (the last key returned); each fetches one row more than the page to know whether another
-- page follows.

-- name: GetJob
select job_group, job_name, job_type, coalesce(description, ''), durable, nonconcurrent, requests_recovery,
       timeout_ms, persist_data, version, data
from job_details
where sched_name = $1 and job_group = $2 and job_name = $3;

-- name: JobTriggers
select trigger_group, trigger_name, state, next_fire_time
from triggers
where job_key(sched_name, job_group, job_name) = job_key($1, $2, $3) and sched_name = $1 and job_group = $2 and job_name = $3
order by trigger_group, trigger_name;

-- name: ListJobs
-- Filters: $2 group, $3 type (null: any). Cursor: after ($4, $5). Served by the primary key.
select job_group, job_name, job_type, coalesce(description, ''), durable, nonconcurrent, requests_recovery,
       timeout_ms, persist_data, version, null::jsonb
from job_details
where sched_name = $1 and ($2::text is null or job_group = $2) and ($3::text is null or job_type = $3)
  and (job_group, job_name) > ($4::text, $5::text)
order by job_group, job_name
limit $6;

-- name: GetTrigger
select t.trigger_group, t.trigger_name, t.job_group, t.job_name, j.job_type, t.state, t.schedule, t.misfire_instr,
       t.priority, t.start_time, t.end_time, t.calendar_name, t.next_fire_time, t.prev_fire_time, t.times_triggered,
       t.version, t.data
from triggers t
join job_details j on j.sched_name = t.sched_name and j.job_group = t.job_group and j.job_name = t.job_name
where t.sched_name = $1 and t.trigger_group = $2 and t.trigger_name = $3;

-- name: ListTriggers
-- Filters: $2 group, $3 state, $4 job type, ($5, $6) job (null: any). Cursor: after ($7, $8).
select t.trigger_group, t.trigger_name, t.job_group, t.job_name, j.job_type, t.state, t.schedule, t.misfire_instr,
       t.priority, t.start_time, t.end_time, t.calendar_name, t.next_fire_time, t.prev_fire_time, t.times_triggered,
       t.version, null::jsonb
from triggers t
join job_details j on j.sched_name = t.sched_name and j.job_group = t.job_group and j.job_name = t.job_name
where t.sched_name = $1 and ($2::text is null or t.trigger_group = $2) and ($3::text is null or t.state = $3)
  and ($4::text is null or j.job_type = $4)
  and ($5::text is null or (t.job_group = $5 and t.job_name = $6))
  and (t.trigger_group, t.trigger_name) > ($7::text, $8::text)
order by t.trigger_group, t.trigger_name
limit $9;

-- name: TriggerSchedule
-- What next_fire_times computes from: the stored trigger, as the fire step reads it.
select state, schedule, next_fire_time, prev_fire_time, times_triggered, coalesce(calendar_name, '')
from triggers
where sched_name = $1 and trigger_group = $2 and trigger_name = $3;

-- name: JobHistory
-- A job's events, newest first, before seq $5: a backward scan of events_aggregate_key that
-- stops after the page. aggregate_id is "<group>.<name>", which two keys with dots can share
-- ("a.b"+"c", "a"+"b.c"); then ($7 false) the key in the data decides. Without dots the filter
-- is left out, as it would make the planner guess too few rows and sort them all instead.
select seq, id, type, source, time, aggregate_id, data, coalesce(trace_context, '')
from events
where events_aggregate_key(sched_name, aggregate, aggregate_id) = events_aggregate_key($1, 'job', $2)
  and sched_name = $1 and aggregate = 'job' and aggregate_id = $2 and seq < $5
  and ($7 or (data->'job'->>'group' = $3 and data->'job'->>'name' = $4))
order by seq desc
limit $6;

-- name: TriggerHistory
-- A trigger's own events and the fire events (JobFired, JobCompleted, JobFailed) of its fires,
-- which are logged under its job: of every job it was ever scheduled for (TriggerScheduled
-- says which), so the history outlives the trigger. Each branch is a backward scan of
-- events_aggregate_key that stops after one page ($7 as in JobHistory), run in index order
-- (store.InIndexOrder): the planner cannot tell how many events a job taken from the trigger's
-- own events has, and read all of a busy job's to sort them.
with jobs as (
    select distinct data->'job'->>'group' as job_group, data->'job'->>'name' as job_name
    from events
    where events_aggregate_key(sched_name, aggregate, aggregate_id) = events_aggregate_key($1, 'trigger', $2)
      and sched_name = $1 and aggregate = 'trigger' and aggregate_id = $2 and type = 'agate.trigger.scheduled'
      and data->'trigger'->>'group' = $3 and data->'trigger'->>'name' = $4
)
select * from (
    (select seq, id, type, source, time, aggregate_id, data, coalesce(trace_context, '')
     from events
     where events_aggregate_key(sched_name, aggregate, aggregate_id) = events_aggregate_key($1, 'trigger', $2)
       and sched_name = $1 and aggregate = 'trigger' and aggregate_id = $2 and seq < $5
       and ($7 or (data->'trigger'->>'group' = $3 and data->'trigger'->>'name' = $4))
     order by seq desc
     limit $6)
    union all
    (select f.* from jobs cross join lateral (
        select seq, id, type, source, time, aggregate_id, data, coalesce(trace_context, '')
        from events e
        where events_aggregate_key(e.sched_name, e.aggregate, e.aggregate_id) = events_aggregate_key($1, 'job', jobs.job_group || '.' || jobs.job_name)
          and e.sched_name = $1 and e.aggregate = 'job' and e.aggregate_id = jobs.job_group || '.' || jobs.job_name
          and e.data->'trigger'->>'group' = $3 and e.data->'trigger'->>'name' = $4 and e.seq < $5
        order by e.seq desc
        limit $6) f)
) h
order by seq desc
limit $6;

-- name: Executing
-- Executions in flight, longest running first. Filters: job ($2, $3), fire ids ($7). Cursor:
-- after ($4, $5).
select f.entry_id, f.job_group, f.job_name, coalesce(j.job_type, ''), f.trigger_group, f.trigger_name,
       f.instance_id, f.sched_time, f.fired_time, f.nonconcurrent, f.requests_recovery, f.recovering
from fired_triggers f
left join job_details j on j.sched_name = f.sched_name and j.job_group = f.job_group and j.job_name = f.job_name
where f.sched_name = $1 and f.state = 'EXECUTING'
  and ($2::text is null or (f.job_group = $2 and f.job_name = $3))
  and ($7::uuid[] is null or f.entry_id = any($7))
  and ($4::timestamptz is null or (f.fired_time, f.entry_id) > ($4, $5::uuid))
order by f.fired_time, f.entry_id
limit $6;

-- name: ListCalendars
select calendar_name, calendar, version
from calendars
where sched_name = $1 and calendar_name > $2
order by calendar_name
limit $3;

-- name: GetCalendar
select c.calendar_name, c.calendar, c.version,
       (select count(*) from triggers t where t.sched_name = c.sched_name and t.calendar_name = c.calendar_name)
from calendars c
where c.sched_name = $1 and c.calendar_name = $2;

-- name: Instances
-- Times by the database clock, the one recovery judges check-ins by.
select instance_id, last_checkin_time, checkin_interval_ms, epoch,
       (extract(epoch from now() - last_checkin_time) * 1000000)::bigint
from scheduler_state
where sched_name = $1
order by instance_id;

-- name: ExplainTrigger
-- explain: the trigger as the fire step reads it, with its job.
select t.state, t.schedule, t.next_fire_time, t.prev_fire_time, t.times_triggered, coalesce(t.calendar_name, ''),
       t.job_group, t.job_name, j.job_type, j.nonconcurrent
from triggers t
join job_details j on j.sched_name = t.sched_name and j.job_group = t.job_group and j.job_name = t.job_name
where t.sched_name = $1 and t.trigger_group = $2 and t.trigger_name = $3;

-- name: ExplainTriggerEvents
-- explain: a trigger's own events, newest first, at most $5 (a backward scan of
-- events_aggregate_key that stops after them).
select id, type, source, time, data
from events
where events_aggregate_key(sched_name, aggregate, aggregate_id) = events_aggregate_key($1, 'trigger', $2)
  and sched_name = $1 and aggregate = 'trigger' and aggregate_id = $2
  and data->'trigger'->>'group' = $3 and data->'trigger'->>'name' = $4
order by seq desc
limit $5;

-- name: ExplainTriggerEnd
-- explain: the fire that deleted trigger $3 ($4, $5), its last: a JobFired of its job $2 saying
-- COMPLETE, logged since the trigger's latest scheduling (an earlier trigger of the same key had
-- fires of its own). Run in index order (store.InIndexOrder): a backward scan of
-- events_aggregate_key from the job's newest event that stops at that fire or at the
-- scheduling's seq.
select id, type, source, time, data
from events
where events_aggregate_key(sched_name, aggregate, aggregate_id) = events_aggregate_key($1, 'job', $2)
  and sched_name = $1 and aggregate = 'job' and aggregate_id = $2
  and seq > coalesce((select max(s.seq) from events s
                      where events_aggregate_key(s.sched_name, s.aggregate, s.aggregate_id) = events_aggregate_key($1, 'trigger', $3)
                        and s.sched_name = $1 and s.aggregate = 'trigger' and s.aggregate_id = $3
                        and s.type = 'agate.trigger.scheduled'
                        and s.data->'trigger'->>'group' = $4 and s.data->'trigger'->>'name' = $5), 0)
  and type = 'agate.job.fired' and data->>'triggerState' = 'COMPLETE'
  and data->'trigger'->>'group' = $4 and data->'trigger'->>'name' = $5
order by seq desc
limit 1;

-- name: ExplainGroupEvents
-- explain: the pauses and resumes of a trigger group ($2) and of every group ('*'), newest first.
select id, type, source, time, data
from events
where events_aggregate_key(sched_name, aggregate, aggregate_id) in (events_aggregate_key($1, 'group', $2), events_aggregate_key($1, 'group', '*'))
  and sched_name = $1 and aggregate = 'group' and aggregate_id in ($2, '*')
order by seq desc
limit 100;

-- name: ExplainJobFires
-- explain: the fires and outcomes of a job logged in [$3, $4), newest first, at most $5. The
-- bounds on recorded_at keep the scan to the days around them (the log is partitioned by day).
select id, type, source, time, data
from events
where events_aggregate_key(sched_name, aggregate, aggregate_id) = events_aggregate_key($1, 'job', $2)
  and sched_name = $1 and aggregate = 'job' and aggregate_id = $2
  and type in ('agate.job.fired', 'agate.job.completed', 'agate.job.failed')
  and recorded_at >= $3 and recorded_at < $4
order by seq desc
limit $5;

-- name: ExplainFiredRows
-- explain: a job's fired rows (claimed or executing), each with whether its node is still a
-- member of the cluster and checking in (within 2 × its interval + 7.5 s, as recovery judges).
select f.entry_id, f.trigger_group, f.trigger_name, f.instance_id, f.fired_time, f.state,
       coalesce(s.last_checkin_time > now() - make_interval(secs => 2 * s.checkin_interval_ms / 1000.0 + 7.5), false)
from fired_triggers f
left join scheduler_state s on s.sched_name = f.sched_name and s.instance_id = f.instance_id
where job_key(f.sched_name, f.job_group, f.job_name) = job_key($1, $2, $3)
  and f.sched_name = $1 and f.job_group = $2 and f.job_name = $3
order by f.fired_time;

-- name: ExplainLiveNodes
-- explain: how many scheduler nodes are checking in.
select count(*)
from scheduler_state
where sched_name = $1 and last_checkin_time > now() - make_interval(secs => 2 * checkin_interval_ms / 1000.0 + 7.5);
