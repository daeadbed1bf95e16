-- The log's index of each aggregate's events (a job's, a trigger's: the history queries and
-- recovery read them newest first) is keyed on a 64-bit hash of the aggregate instead of its
-- three text columns. Every event is an entry in it, at a place its aggregate decides, so
-- inserting one walks the index comparing keys: the text columns cost about 3.5 µs a row more
-- than the hash (720,000 rows of a burst's log, then 143,844 more: 2.50–2.55 s against
-- 1.95–2.08 s, 2026-11-30; docs/performance.md), and the index took 131 MB against 84 with the
-- primary key. A reader names the aggregate through events_aggregate_key, so that its
-- condition is the index's expression, and checks the columns too (two aggregates may share a
-- hash).
create function events_aggregate_key(sched_name text, aggregate text, aggregate_id text) returns bigint
    language sql immutable parallel safe
    as $$ select hashtextextended(sched_name || '/' || aggregate || '/' || aggregate_id, 0) $$;

create index events_aggregate_key on events (events_aggregate_key(sched_name, aggregate, aggregate_id), seq);
drop index events_aggregate_seq;

---- create above / drop below ----

create index events_aggregate_seq on events (sched_name, aggregate, aggregate_id, seq);
drop index events_aggregate_key;
drop function events_aggregate_key(text, text, text);
