-- The outbox sweep finds the events of a transaction it publishes by the seqs they span,
-- recorded in the transaction's outbox_txs row, through the log's primary key; the index
-- events_relay (xid, seq), which found them by xid, is dropped. Since migration 014 the sweep
-- walks outbox_txs and reads the events of a transaction only when no live node vouches for it,
-- which is rare, yet every event to publish (three of a fire's four rows) paid for an entry in
-- events_relay: about 4 µs a row to insert (docs/performance.md).
--   seq_from, seq_to: the least and the greatest seq of the transaction's events to publish.
alter table outbox_txs add column seq_from bigint, add column seq_to bigint;

update outbox_txs t set seq_from = s.seq_from, seq_to = s.seq_to
from (select e.sched_name, e.xid, min(e.seq) as seq_from, max(e.seq) as seq_to
      from events e join outbox_txs o on o.sched_name = e.sched_name and o.xid = e.xid
      where e.nats_subject is not null
      group by e.sched_name, e.xid) s
where s.sched_name = t.sched_name and s.xid = t.xid;
-- A transaction whose events were all swept already (the cursor stood inside it) has nothing
-- left to read.
update outbox_txs set seq_from = 0, seq_to = -1 where seq_from is null;
alter table outbox_txs alter column seq_from set not null, alter column seq_to set not null;

drop index events_relay;

---- create above / drop below ----

create index events_relay on events (xid, seq) where nats_subject is not null;
alter table outbox_txs drop column seq_from, drop column seq_to;
