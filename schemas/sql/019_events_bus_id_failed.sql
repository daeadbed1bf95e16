-- events_bus_id holds only the outcomes that may be logged twice: a JobFailed that did not end
-- its execution (a retry follows), which the completion step logs with AppendFromBus after a
-- probe of this index. An outcome that ends its execution (JobCompleted, a final JobFailed) is
-- logged only by the transaction that ends it, without a probe (internal/complete), yet every
-- JobCompleted paid for an entry here: one of the seven index entries a one-shot fire's
-- completion makes, at a place its random id decides.
create index events_bus_failed on events (id) where nats_subject is null and type = 'agate.job.failed';
drop index events_bus_id;

---- create above / drop below ----

create index events_bus_id on events (id) where nats_subject is null;
drop index events_bus_failed;
