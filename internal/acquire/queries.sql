-- name: SelectDue
-- Served by the partial index triggers_acquire (sched_name, next_fire_time, priority desc) where WAITING.
select t.trigger_group, t.trigger_name, t.job_group, t.job_name, t.next_fire_time, t.priority,
       j.nonconcurrent, j.requests_recovery
from triggers t
join job_details j on j.sched_name = t.sched_name and j.job_group = t.job_group and j.job_name = t.job_name
where t.sched_name = $1
  and t.state = 'WAITING'
  and t.next_fire_time <= $2
  and (t.next_fire_time >= $3 or t.misfire_instr = 'ignore_misfire_policy')
  and t.partition % $5 = $6
order by t.next_fire_time, t.priority desc
limit $4;

-- name: MarkAcquired
update triggers t set state = 'ACQUIRED'
from unnest($2::text[], $3::text[], $4::timestamptz[]) as c(g, n, nft)
where t.sched_name = $1 and t.trigger_group = c.g and t.trigger_name = c.n
  and t.state = 'WAITING' and t.next_fire_time = c.nft
returning t.trigger_group, t.trigger_name;

-- name: NextWaiting
select min(next_fire_time) from triggers where sched_name = $1 and state = 'WAITING';
