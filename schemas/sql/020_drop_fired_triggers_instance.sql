-- fired_triggers_instance (sched_name, instance_id) is dropped: every fire paid an entry in it,
-- and what read it reads little. fired_triggers holds only the executions in flight and the
-- claims made ahead; a node's claims are looked up by their node only when they are given back
-- for it (ReleaseClaims after a node failed), and the recovery scans that took the index for
-- its leading namespace read all of a namespace's rows anyway. Those now read the table.
drop index fired_triggers_instance;

---- create above / drop below ----

create index fired_triggers_instance on fired_triggers (sched_name, instance_id);
