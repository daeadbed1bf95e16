-- History queries read one aggregate's events newest first, a page at a time: with seq in the
-- index that is a backward index scan that stops after the page, instead of reading and sorting
-- every event of a long-lived job (one firing every second logs about 170,000 a day). The index
-- replaces events_aggregate, whose every use it serves too, so writes pay for no extra index.
create index events_aggregate_seq on events (sched_name, aggregate, aggregate_id, seq);
drop index events_aggregate;

-- A trigger's fires are logged under its job, so its history filters the job's events on the
-- trigger key in their data. Without statistics on that expression the planner guesses it
-- keeps almost nothing and reads all of a busy job's events to sort them (0.7 s for 300,000);
-- with them it scans backward and stops after the page (0.2 ms). Statistics cost nothing on
-- insert. (PostgreSQL 14 or later.)
create statistics events_trigger_key on (data->'trigger'->>'group'), (data->'trigger'->>'name') from events;

---- create above / drop below ----

drop statistics events_trigger_key;
create index events_aggregate on events (sched_name, aggregate, aggregate_id);
drop index events_aggregate_seq;
