-- name: DeleteFired
delete from fired_triggers
where entry_id = any($1)
returning entry_id, trigger_group, trigger_name, job_group, job_name, nonconcurrent;

-- name: Release
-- Quartz: when a non-concurrent job's execution ends, its blocked triggers may fire again.
update triggers t
set state = case t.state when 'PAUSED_BLOCKED' then 'PAUSED' else 'WAITING' end
from unnest($2::text[], $3::text[]) as j(g, n)
where t.sched_name = $1 and t.job_group = j.g and t.job_name = j.n
  and t.state in ('BLOCKED', 'PAUSED_BLOCKED')
returning t.trigger_group, t.trigger_name;

-- name: DeleteCompleteTriggers
-- The state is a join column, not a constant, so lagging statistics ("no trigger is COMPLETE")
-- cannot turn the key list into a scan of the namespace per key (see fire's UpdateTriggers).
delete from triggers t
using unnest($2::text[], $3::text[], $4::text[]) as c(g, n, state)
where t.sched_name = $1 and t.trigger_group = c.g and t.trigger_name = c.n and t.state = c.state;

-- name: DeleteOrphanJobs
-- A non-durable job with no trigger left goes too (Quartz's removeTrigger).
delete from job_details j
using unnest($2::text[], $3::text[]) as c(g, n)
where j.sched_name = $1 and j.job_group = c.g and j.job_name = c.n and not j.durable
  and not exists (select 1 from triggers t
                  where t.sched_name = j.sched_name and t.job_group = j.job_group and t.job_name = j.job_name)
returning j.job_group, j.job_name;
