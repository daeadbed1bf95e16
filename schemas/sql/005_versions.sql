-- Optimistic concurrency: a version per job, trigger and calendar, counting the changes commands
-- made to it (definition, pause state); firing does not change it. A command may carry the
-- expectedVersion it read; a stale one is refused (failed_precondition).
alter table job_details add column version bigint not null default 1;
alter table triggers add column version bigint not null default 1;
alter table calendars add column version bigint not null default 1;

---- create above / drop below ----

alter table calendars drop column version;
alter table triggers drop column version;
alter table job_details drop column version;
