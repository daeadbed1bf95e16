package node_test

import (
	"testing"
	"time"

	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/retention"
)

// A command's outcome is remembered for the idempotency window (7 days by default): sent again
// within it, the command is answered as the first time whatever its body; once its outcome is
// older, the node deletes it and the same id is handled as a new command.
func TestCommandsAreRememberedForTheWindow(t *testing.T) {
	e := newEnv(t)
	signals := &node.TestSignals{}
	signals.Prune.Pass.Init()
	e.startNode("n1", func(c *node.Config) {
		c.TestSignals = signals
		c.PruneInterval = 200 * time.Millisecond
	})
	at := time.Now().Add(time.Hour)
	schedule := func(id, name string) map[string]any {
		return map[string]any{"id": id, "job": job("g", name, "noop", nil, nil), "triggers": []any{oneShot("g", name, at)}}
	}
	young := e.request("schedule_job", schedule("c-young", "a"))
	if old := e.request("schedule_job", schedule("c-old", "b")); !old.OK || !young.OK {
		t.Fatalf("schedule_job: %+v, %+v", old.Error, young.Error)
	}
	// Six and eight days ago, by the database clock the window is counted on.
	e.exec(`update commands_seen set created_at = now() - interval '6 days' where sched_name = $1 and command_id = 'c-young'`, e.ns)
	e.exec(`update commands_seen set created_at = now() - interval '8 days' where sched_name = $1 and command_id = 'c-old'`, e.ns)

	signals.Prune.Pass.WaitUntil(t, func(p retention.Pruned) bool { return p.Commands == 1 })
	if n := e.count(`select count(*) from commands_seen where sched_name = $1 and command_id in ('c-old', 'c-young')`, e.ns); n != 1 {
		t.Fatalf("%d of c-old and c-young remembered after pruning; want c-young alone", n)
	}

	// Within the window: the remembered outcome, though the body now names another job.
	again := e.request("schedule_job", schedule("c-young", "other"))
	if a, b := mustJSON(t, again), mustJSON(t, young); string(a) != string(b) {
		t.Errorf("c-young sent again got\n%s\nwant the remembered\n%s", a, b)
	}
	if n := e.count(`select count(*) from job_details where sched_name = $1 and job_name = 'other'`, e.ns); n != 0 {
		t.Errorf("c-young sent again with another body stored its job")
	}
	// Beyond it: a new command, rejected now because its job exists.
	if out := e.request("schedule_job", schedule("c-old", "b")); out.OK || out.Error == nil || out.Error.Code != "already_exists" {
		t.Errorf("c-old sent again after the window: %s; want already_exists, as a new command", mustJSON(t, out))
	}
}
