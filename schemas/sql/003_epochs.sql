-- Fencing (Quartz.NET #2817: a slow node declared dead keeps firing). Each time a node joins the
-- cluster its membership row gets a new epoch; claims record the epoch that made them. A node
-- whose row is gone or carries another epoch has been declared failed: its claims are refused.
-- Epochs come from one sequence, so a node that rejoins after its row was deleted never gets an
-- epoch it held before.
create sequence scheduler_epoch;
alter table scheduler_state add column epoch bigint not null default nextval('scheduler_epoch');
alter table fired_triggers add column epoch bigint not null default 0;

---- create above / drop below ----

alter table fired_triggers drop column epoch;
alter table scheduler_state drop column epoch;
drop sequence scheduler_epoch;
