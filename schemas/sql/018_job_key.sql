-- The indexes that find a job's triggers and fired rows are keyed on a 64-bit hash of the job
-- instead of its three text columns, as the log's aggregate index is (migration 017). A fire
-- updates its trigger (a new row version: its state and next fire time are indexed, so the
-- update is never HOT), which enters triggers_job again, and inserts its fired row, which
-- enters fired_triggers_job: two entries a fire, at places the job decides, each walking the
-- index comparing three text columns. With the hash, updating 20,000 one-shot triggers to
-- COMPLETE in batches of 500 took 752–765 ms against 861–881, and inserting 20,000 fired rows
-- in an order unrelated to their jobs' 514–529 ms against 586–725 (2026-11-30,
-- docs/performance.md). A reader names the job through job_key, so that its condition is the
-- index's expression, and checks the columns too (two jobs may share a hash).
create function job_key(sched_name text, job_group text, job_name text) returns bigint
    language sql immutable parallel safe
    as $$ select hashtextextended(sched_name || '/' || job_group || '/' || job_name, 0) $$;

create index triggers_job_key on triggers (job_key(sched_name, job_group, job_name), sched_name, job_group, job_name);
drop index triggers_job;
create index fired_triggers_job_key on fired_triggers (job_key(sched_name, job_group, job_name), sched_name, job_group, job_name);
drop index fired_triggers_job;

---- create above / drop below ----

create index triggers_job on triggers (sched_name, job_group, job_name);
drop index triggers_job_key;
create index fired_triggers_job on fired_triggers (sched_name, job_group, job_name);
drop index fired_triggers_job_key;
drop function job_key(text, text, text);
