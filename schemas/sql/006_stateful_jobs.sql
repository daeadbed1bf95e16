-- Stateful jobs (Quartz's @PersistJobDataAfterExecution): a completed run may hand back new job
-- data, which is stored on the job when it persists its data.
alter table job_details add column persist_data boolean not null default false;

---- create above / drop below ----

alter table job_details drop column persist_data;
