-- An execution that can no longer finish (no outcome in time) is fired once more with the same
-- fire id when its job requests recovery; the fired row remembers that it was, so that the
-- second time it is abandoned for good.
alter table fired_triggers add column recovering boolean not null default false;

---- create above / drop below ----

alter table fired_triggers drop column recovering;
