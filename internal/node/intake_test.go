package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
)

// Durable commands are applied in batches and each message is acked only after its batch
// committed: while the batch waits for a lock nothing is acked, a batch whose transaction the
// database aborted is nacked whole and leaves no row, and once the lock is free every command is
// applied exactly once.
func TestCommandBatchAckedOnlyAfterCommit(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", nil)
	// The node is up and its lock rows exist.
	if out := e.request("schedule_job", map[string]any{"id": "warm", "job": job("g", "warm", "noop", nil, map[string]any{"durable": true})}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	locks := store.Locks{Namespace: e.ns, Partitions: 8}
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(t.Context()) }()
	if err := locks.All(t.Context(), tx); err != nil {
		t.Fatal(err)
	}

	const n = 20
	at := time.Now().Add(time.Hour)
	for i := range n {
		body := mustJSON(t, map[string]any{"id": fmt.Sprintf("b%d", i), "job": job("g", fmt.Sprintf("j%d", i), "noop", nil, nil),
			"triggers": []any{oneShot("g", fmt.Sprintf("t%d", i), at)}})
		if _, err := e.js.PublishAsync(events.Subjects(e.ns).Command("schedule_job"), body); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("publishing the commands did not complete")
	}
	cons, err := e.js.Consumer(t.Context(), events.StreamCommands(e.ns), command.DurableName)
	if err != nil {
		t.Fatal(err)
	}
	info := func() *jetstream.ConsumerInfo {
		t.Helper()
		i, err := cons.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	e.waitFor(10*time.Second, "every command to be delivered and its batch to wait for the lock", func() bool {
		return info().NumAckPending == n && e.count(`select count(*) from pg_stat_activity
			where datname = current_database() and wait_event_type = 'Lock' and $1 <> ''`, e.ns) > 0
	})
	// The database ends the waiting transactions (as a restart would): their batches are nacked.
	if got := e.count(`select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity
		where datname = current_database() and wait_event_type = 'Lock' and $1 <> '') t`, e.ns); got == 0 {
		t.Fatal("no batch transaction to end")
	}
	e.waitFor(20*time.Second, "the nacked commands to come round again", func() bool {
		return info().NumRedelivered > 0
	})
	if got := e.count(`select count(*) from triggers where sched_name = $1`, e.ns); got != 0 {
		t.Errorf("%d triggers stored by a batch that did not commit", got)
	}
	if got := e.count(`select count(*) from commands_seen where sched_name = $1 and command_id like 'b%'`, e.ns); got != 0 {
		t.Errorf("%d outcomes remembered by a batch that did not commit", got)
	}
	if i := info(); i.NumAckPending != n {
		t.Errorf("%d of %d commands are waiting for an ack before any commit", i.NumAckPending, n)
	}

	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.waitFor(20*time.Second, "every command to be applied and acked", func() bool {
		return info().NumAckPending == 0
	})
	if got := e.count(`select count(*) from triggers where sched_name = $1`, e.ns); got != n {
		t.Errorf("%d triggers, want %d", got, n)
	}
	if got := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeCommandAccepted); got != n+1 {
		t.Errorf("%d CommandAccepted events, want %d: each command once", got, n+1)
	}
}
