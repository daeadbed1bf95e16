-- name: PruneCommandsSeen
-- At most $3 remembered outcomes of namespace $1 older than $2 microseconds by the database
-- clock (created_at's), oldest first, found through commands_seen_created and deleted by their
-- row ids. Rows are never updated, so a row id stays its row's for the statement.
delete from commands_seen where ctid = any(array(
    select ctid from commands_seen
    where sched_name = $1 and created_at < now() - $2::bigint * interval '1 microsecond'
    order by created_at
    limit $3));

-- name: PruneRejectedBodies
-- PruneCommandsSeen for the bodies of rejected commands.
delete from rejected_bodies where ctid = any(array(
    select ctid from rejected_bodies
    where sched_name = $1 and received_at < now() - $2::bigint * interval '1 microsecond'
    order by received_at
    limit $3));
