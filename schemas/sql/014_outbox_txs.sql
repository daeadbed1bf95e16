-- The transactions whose events the outbox sweep has still to pass: one row per committed
-- transaction that logged events to publish, written by the log's append in the same statement,
-- deleted by the sweep once it passed the transaction. The sweep used to walk every event row
-- after its cursor to find the few no live node vouched for: some 10 µs a row, a tenth of
-- PostgreSQL's statement time in a burst, for rows almost all of which it only passed over. It
-- now walks these rows, one per transaction (a transaction fires or completes up to 500), and
-- reads the events of a transaction only when nobody vouches for it.
--   source: the node that committed it (agate/<ns>/<instance>), which vouches for it once
--           JetStream stored its events; '' when some of its events to publish were another's
--           (then no node vouches for it, and the sweep publishes it).
--   events: how many of its events are to publish, to bound a sweep pass.
--   time:   the earliest of those events' times (their writer's clock): the sweep leaves a
--           transaction younger than its delay to the node publishing it.
create table outbox_txs (
    sched_name  text        not null,
    xid         xid8        not null,
    source      text        not null,
    events      integer     not null,
    time        timestamptz not null,
    primary key (sched_name, xid)
);

-- The transactions after each namespace's cursor, from the log, so the sweep passes them as
-- before. The cursor's own transaction is included: the old sweep may have passed it in part,
-- and the sweep goes on after the cursor's row in it.
insert into outbox_txs (xid, sched_name, source, events, time)
select e.xid, e.sched_name, case when count(distinct e.source) = 1 then min(e.source) else '' end, count(*),
       min(e.time)
from events e
join outbox_cursor c on c.sched_name = e.sched_name
where e.nats_subject is not null and e.xid >= c.last_xid
group by e.xid, e.sched_name;

---- create above / drop below ----

drop table outbox_txs;
