-- Commands are remembered for the idempotency window only (docs/contract.md, "Commands"): each
-- node deletes, in small batches, the remembered outcomes and rejected bodies of its namespace
-- older than the window (internal/retention). These indexes let it find the oldest rows, or
-- that there are none, without reading the whole tables every pass. Building them holds writes
-- to the two tables (command intake) for the build, about a second per million rows.
create index commands_seen_created on commands_seen (sched_name, created_at);
create index rejected_bodies_received on rejected_bodies (sched_name, received_at);

---- create above / drop below ----

drop index rejected_bodies_received;
drop index commands_seen_created;
