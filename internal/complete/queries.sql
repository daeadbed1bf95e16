-- name: StoreJobData
-- Job data handed back by completed runs, on the jobs that persist it. Runs of one job in one
-- batch are stored in the order given (the last wins: ordinality orders the updates' sources).
update job_details j set data = c.data::jsonb
from (select distinct on (g, n) g, n, data from unnest($2::text[], $3::text[], $4::text[]) with ordinality as u(g, n, data, i)
      order by g, n, i desc) c
where j.sched_name = $1 and j.job_group = c.g and j.job_name = c.n and j.persist_data;
