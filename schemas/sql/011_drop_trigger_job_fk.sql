-- A trigger's job is no longer checked by a foreign key. Every write keeps the rule itself, under
-- the lock protocol (docs/architecture.md): a trigger is inserted in the statement that inserts its
-- job, or after the job's row was read FOR UPDATE under the job's partition; a job is deleted
-- after its triggers, or by a statement that checks it has none. The key's checks cost a query
-- per row, planned at every execution (plan_cache_mode force_custom_plan: deleting the jobs of
-- 500 one-shot fires spent 17.8 ms in the check), about a tenth of PostgreSQL's CPU per one-shot
-- fire and per scheduled trigger (docs/performance.md). The test suite checks the rule in every
-- database it makes (testenv.MigratedDatabase).
alter table triggers drop constraint triggers_sched_name_job_group_job_name_fkey;

---- create above / drop below ----

alter table triggers add foreign key (sched_name, job_group, job_name) references job_details (sched_name, job_group, job_name);
