-- A snapshot of the log's projection (internal/replay) is now fenced by seq, not by
-- transaction id: it holds exactly the events below seq_below, and replay applies those at or
-- above it. The log's order is seq order, and transactions do not commit in the order of their
-- ids: a transaction with a low id can log after one with a higher id has committed (it waited
-- for a row the other held). A fence on ids (the oldest transaction running) then put the later
-- event in the snapshot and the earlier one after it, so replay from the snapshot applied them
-- in the wrong order. A seq fence is a prefix of the log, provided every event below it has
-- committed (or rolled back) when the snapshot reads: the snapshot waits for every transaction
-- that had an id when it reserved its fence, and that is every transaction holding seqs below it
-- because a transaction now takes its id before it reserves seqs (events_seq_bases, below).
--
-- Snapshots taken before have seq_below null and keep their id fence: replay from one applies
-- the events at or above its fence, as it did.
alter table event_snapshots add column seq_below bigint;

-- The bases of the blocks for n events, reserved now, after the transaction has taken its id.
create or replace function events_seq_bases(n integer) returns bigint[] language plpgsql volatile as $$
begin
    perform pg_current_xact_id();
    return array(select nextval('events_seq_seq') from generate_series(0, (n - 1) / 4096));
end $$;

---- create above / drop below ----

create or replace function events_seq_bases(n integer) returns bigint[] language sql volatile
    as $$ select array(select nextval('events_seq_seq') from generate_series(0, (n - 1) / 4096)) $$;
-- A seq-fenced snapshot is not an id-fenced one: an event of a transaction below its id fence
-- may lie above its seq fence. Replay falls back to an id-fenced snapshot if one is left, else
-- to the whole log; days of the log dropped since a seq-fenced snapshot covered them are gone.
delete from event_snapshots where seq_below is not null;
alter table event_snapshots drop column seq_below;
