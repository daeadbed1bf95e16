-- The log's appends take their seqs a block at a time: one nextval per 4,096 events of a
-- statement (outbox Append, AppendFromBus: block base + the row's position), instead of one per
-- row. A nextval per row cost about 4 µs of a row's 12 in a multi-row insert (the sequence's
-- buffer locked and dirtied, a WAL record every 32 values), a tenth of a one-shot fire's
-- PostgreSQL time. A block is taken when its statement runs, as a row's seq was, so the log's
-- order is what it was: a statement's events in their order, after those of every statement
-- that reserved before it. seqs now have gaps (they had at every rollback).
-- The block size is the statements' constant: outbox.seqBlock, checked against this increment
-- by TestSeqBlockIsTheSequenceIncrement.
alter sequence events_seq_seq increment by 4096;

---- create above / drop below ----

alter sequence events_seq_seq increment by 1;
