-- The log's appends take their seqs a block at a time: one nextval per 4,096 events of a
-- statement instead of one per row. A nextval per row cost about 4 µs of a row's 12 in a
-- multi-row insert (the sequence's buffer locked and dirtied, a WAL record every 32 values), a
-- tenth of a one-shot fire's PostgreSQL time (docs/performance.md). A block is taken when its
-- statement runs, as a row's seq was, so the log's order is what it was: a statement's events
-- in their order, after those of every statement that reserved before it. seqs now have gaps
-- (they had at every rollback). The block size is the sequence's increment and is written in
-- these two functions, which outbox Append and AppendFromBus call; the column's default
-- (nextval) would take a whole block for one row, and nothing inserts without a seq.
alter sequence events_seq_seq increment by 4096;

-- The bases of the blocks for n events, reserved now. Volatile: a statement calls it once, in a
-- CTE (never inlined, so never run again per row).
create function events_seq_bases(n integer) returns bigint[] language sql volatile
    as $$ select array(select nextval('events_seq_seq') from generate_series(0, (n - 1) / 4096)) $$;

-- The seq of a statement's i-th event (from 1) in the blocks whose bases are given. Inlined.
create function events_seq_at(bases bigint[], i bigint) returns bigint language sql immutable
    as $$ select bases[(i - 1) / 4096 + 1] + (i - 1) % 4096 $$;

---- create above / drop below ----

drop function events_seq_at(bigint[], bigint);
drop function events_seq_bases(integer);
alter sequence events_seq_seq increment by 1;
