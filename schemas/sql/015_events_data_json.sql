-- The log keeps each event's data as json (the text as written, checked to be JSON), no longer
-- as jsonb. Nothing reads the log's data by jsonb's means: the history queries and recovery
-- take a few keys with -> and ->>, which json has too, from the rows an index found; replay
-- and the outbox sweep read the text. jsonb cost a row about 3.3 µs more than json to insert,
-- parsing it into its binary form (143,844 rows of a burst's log, 21.2 µs against 17.9 a row
-- with the log's indexes, 2026-11-30; docs/performance.md), on every one of a fire's four rows
-- and a command's three. The sweep now publishes again the very bytes the node published, not
-- jsonb's rewriting of them (its key order and spacing).
--
-- This rewrites every partition of the log once.
alter table events alter column data type json using data::json;

---- create above / drop below ----

alter table events alter column data type jsonb using data::jsonb;
