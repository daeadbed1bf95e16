-- The log's id index holds only the events that came from the bus (workers' outcomes, logged
-- without a subject). It serves one statement, AppendFromBus, which skips an event the log holds
-- already: only those can arrive twice. Every other event is written once by the node that made
-- it, with a fresh id, and paid for an index entry nothing read: one of the four index entries
-- of every command's and every fire's rows.
create index events_bus_id on events (id) where nats_subject is null;
drop index events_id;

---- create above / drop below ----

create index events_id on events (id);
drop index events_bus_id;
