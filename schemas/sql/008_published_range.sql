-- Publish each event once. A node publishes the events of its transactions right after commit
-- and waits for JetStream's acknowledgement; at each check-in it vouches that every event it
-- committed with an xid in [published_from, published_below) is stored in JetStream. The outbox
-- sweep skips those rows instead of publishing them again, and publishes only what no live node
-- vouches for: a dead node's leftovers, events whose publishing failed, or a queue that
-- overflowed. published_from is the xid of the node's join, so rows an earlier run of the same
-- instance id left unpublished are never vouched for.
alter table scheduler_state add column published_from xid8;
alter table scheduler_state add column published_below xid8;

---- create above / drop below ----

alter table scheduler_state drop column published_below;
alter table scheduler_state drop column published_from;
