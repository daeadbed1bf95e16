package node_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/acquire"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/recovery"
	"github.com/agatesched/agate/internal/store"
)

// A trigger scheduled to fire before the node's next poll fires on time: applying the command
// wakes the acquire loop.
func TestNewTriggerFiresBeforeNextPoll(t *testing.T) {
	e := newEnv(t)
	signals := &node.TestSignals{}
	signals.Acquire.Pass.Init()
	signals.Complete.Applied.Init()
	e.startNode("n1", func(c *node.Config) { c.PollInterval = time.Minute; c.TestSignals = signals })
	e.startWorker("w1", nil, nil)
	// Let the node finish its first pass and settle into its long poll sleep.
	signals.Acquire.Pass.Wait(t)
	at := time.Now().Add(300 * time.Millisecond)
	if out := e.request("schedule_job", map[string]any{"id": "soon", "job": job("g", "soon", "noop", nil, nil),
		"triggers": []any{oneShot("g", "soon", at)}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	signals.Complete.Applied.WaitUntil(t, func(a complete.Applied) bool { return a.Ended == 1 })
	var late time.Duration
	if err := e.pool.QueryRow(t.Context(), `select (data->>'startedTime')::timestamptz - (data->>'scheduledTime')::timestamptz
		from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late > 5*time.Second {
		t.Errorf("fired %v late although the poll interval is a minute: the command did not wake the node", late)
	}
}

// NATS stops while triggers fire and comes back: fires committed meanwhile are published by the
// outbox sweep, run, and completed — none lost, none doubled.
func TestNATSOutageLosesNothing(t *testing.T) {
	e := newEnv(t)
	srv := testenv.StartNATS(t)
	e.natsURL = srv.URL() // nodes and workers of this test use the private server
	nc, js := testenv.JetStream(t, srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err := events.EnsureStreams(t.Context(), js, e.ns); err != nil {
		t.Fatal(err)
	}
	e.nc, e.js = nc, js
	e.startNode("n1", nil)
	e.startWorker("w1", nil, nil)

	// 20 triggers firing every 100 ms for 4 s, across the outage.
	t0 := time.Now().Add(time.Second)
	e.scheduleRepeating(20, t0, 100*time.Millisecond, 39)
	e.waitFor(20*time.Second, "the fires to be under way", func() bool { // the outage starts in the middle of them
		return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) >= 100
	})
	srv.Shutdown()
	firedDuringOutage := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobFired)
	time.Sleep(1500 * time.Millisecond) // how long the outage lasts, not a wait for something
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobFired); n <= firedDuringOutage {
		t.Errorf("no fires were committed while NATS was down (%d before, %d after)", firedDuringOutage, n)
	}
	diag := func() {
		// Say where each unfinished fire got to: the log, the FIRED stream, a worker.
		var unfinished []string
		rows, err := e.pool.Query(context.Background(), `select f.data->>'fireId', f.seq, f.xid::text, f.time
			from events f where f.sched_name = $1 and f.type = $2 and not exists (select 1 from events c
			where c.sched_name = f.sched_name and c.type = $3 and c.data->>'fireId' = f.data->>'fireId')`,
			e.ns, events.TypeJobFired, events.TypeJobCompleted)
		if err != nil {
			t.Log(err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var id, xid string
			var seq int64
			var at time.Time
			_ = rows.Scan(&id, &seq, &xid, &at)
			unfinished = append(unfinished, id)
			t.Logf("unfinished fire %s: log seq %d xid %s time %s", id, seq, xid, at.Format(time.StampMicro))
			var evID string
			_ = e.pool.QueryRow(context.Background(), `select id::text from events where sched_name = $1 and seq = $2`, e.ns, seq).Scan(&evID)
			t.Logf("  its event id %s", evID)
		}
		var cursorXID string
		var cursorSeq int64
		_ = e.pool.QueryRow(context.Background(), `select last_xid::text, last_seq from outbox_cursor where sched_name = $1`, e.ns).Scan(&cursorXID, &cursorSeq)
		t.Logf("outbox cursor: xid %s seq %d", cursorXID, cursorSeq)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := e.js.Stream(ctx, events.StreamFired(e.ns))
		if err != nil {
			t.Logf("FIRED stream: %v", err)
			return
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Logf("FIRED stream: %v", err)
			return
		}
		t.Logf("FIRED stream: %d messages, first seq %d, last seq %d", info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
		for _, name := range []string{"worker-noop"} {
			if c, err := s.Consumer(ctx, name); err == nil {
				if ci, err := c.Info(ctx); err == nil {
					t.Logf("consumer %s: delivered %d, ack floor %d, pending %d, ack pending %d, redelivered %d",
						name, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending, ci.NumRedelivered)
				}
			}
		}
		oc, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Logf("reading FIRED: %v", err)
			return
		}
		batch, err := oc.Fetch(int(info.State.Msgs), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Logf("reading FIRED: %v", err)
			return
		}
		for m := range batch.Messages() {
			md, _ := m.Metadata()
			for _, id := range unfinished {
				if bytes.Contains(m.Data(), []byte(id)) {
					t.Logf("unfinished fire %s is in FIRED at stream seq %d (delivered %d times)", id, md.Sequence.Stream, md.NumDelivered)
				}
			}
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for e.count(`select count(distinct data->>'fireId') from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) < 800 {
		if time.Now().After(deadline) {
			diag()
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	e.waitCount(60*time.Second, "fires completed", 800,
		`select count(distinct data->>'fireId') from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted)
	if n := e.count(`select count(*) from (select 1 from events where sched_name = $1 and type = $2
		group by data->'trigger'->>'name', data->>'scheduledTime' having count(*) > 1) d`, e.ns, events.TypeJobFired); n != 0 {
		t.Errorf("%d (trigger, time) pairs fired more than once", n)
	}
	if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted); n != 800 {
		t.Errorf("%d completions recorded, want 800", n)
	}
}

// A node that died holding claims (kill -9: no release on the way out) is detected by the
// database clock; its claims return to WAITING and another node fires them, once.
func TestDeadNodesClaimsAreRecovered(t *testing.T) {
	lockModes(t, func(t *testing.T, mode func(*node.Config)) {
		e := newEnv(t)
		e.startNode("n1", mode)
		e.startWorker("w1", nil, nil)
		if out := e.request("schedule_job", map[string]any{"id": "later", "job": job("g", "orphan", "noop", nil, nil),
			"triggers": []any{oneShot("g", "orphan", time.Now().Add(time.Hour))}}); !out.OK {
			t.Fatalf("schedule_job: %+v", out.Error)
		}
		// What a node that acquired the trigger and then died leaves behind.
		e.tablesEditedByHand()
		due := time.Now().Add(500 * time.Millisecond).UTC().Truncate(time.Millisecond)
		for _, q := range []string{
			`update triggers set state = 'ACQUIRED', next_fire_time = $2 where sched_name = $1`,
			`insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name, instance_id,
				fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
			 values ($1, gen_random_uuid(), 'g', 'orphan', 'g', 'orphan', 'dead-node', now(), $2, 'ACQUIRED', false, false, 5)`,
			`insert into scheduler_state (sched_name, instance_id, last_checkin_time, checkin_interval_ms)
			 values ($1, 'dead-node', $2::timestamptz - interval '1 minute', 1000)`,
		} {
			// $2 is the claim's fire time; the dead node last checked in a minute before it.
			if _, err := e.pool.Exec(t.Context(), q, e.ns, due); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		e.waitFor(30*time.Second, "the dead node's claim to fire and complete", func() bool {
			return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) == 1
		})
		if n := e.count(`select count(*) from events where sched_name = $1 and type = $2 and data->>'reason' = 'node failed'`,
			e.ns, events.TypeTriggerReleased); n != 1 {
			t.Errorf("%d release events for the dead node's claim, want 1", n)
		}
		if n := e.count(`select count(*) from scheduler_state where sched_name = $1 and instance_id = 'dead-node'`, e.ns); n != 0 {
			t.Error("the dead node is still a cluster member")
		}
		if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobFired); n != 1 {
			t.Errorf("fired %d times, want once", n)
		}
	})
}

// Without a tracer provider (nothing records spans), the producer's trace context follows the
// job: the trigger row, the JobFired message and the completion carry its trace id. With one,
// each fire starts a trace of its own, linked to the scheduling span (cmd/scheduler's
// TestTracesAcrossProcesses).
func TestTraceFollowsTheJob(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", nil)
	e.startWorker("w1", nil, nil)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	msg := nats.NewMsg(events.Subjects(e.ns).API("schedule_job"))
	msg.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	msg.Data = mustJSON(t, map[string]any{"id": "traced", "job": job("g", "traced", "noop", nil, nil),
		"triggers": []any{oneShot("g", "traced", time.Now())}})
	e.waitFor(10*time.Second, "the node to answer", func() bool {
		reply, err := e.nc.RequestMsg(msg, 5*time.Second)
		return err == nil && strings.Contains(string(reply.Data), `"ok":true`)
	})
	e.waitFor(20*time.Second, "the job to complete", func() bool {
		return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) == 1
	})
	for _, typ := range []string{events.TypeTriggerScheduled, events.TypeJobFired, events.TypeJobCompleted} {
		var tp string
		if err := e.pool.QueryRow(t.Context(), `select coalesce(trace_context, '') from events where sched_name = $1 and type = $2`,
			e.ns, typ).Scan(&tp); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tp, "00-"+traceID+"-") {
			t.Errorf("%s carries traceparent %q, not the producer's trace %s", typ, tp, traceID)
		}
	}
}

// A node stopped gracefully gives back the claims it has not fired and leaves the cluster; the
// next node fires them on time.
func TestGracefulStopGivesClaimsBack(t *testing.T) {
	lockModes(t, func(t *testing.T, mode func(*node.Config)) {
		e := newEnv(t)
		signals := &node.TestSignals{}
		signals.Acquire.Pass.Init()
		stop := e.startNode("n1", func(c *node.Config) { mode(c); c.FireAhead = 10 * time.Second; c.TestSignals = signals })
		at := time.Now().Add(4 * time.Second)
		if out := e.request("schedule_job", map[string]any{"id": "claimed", "job": job("g", "j", "noop", nil, nil),
			"triggers": []any{oneShot("g", "t", at)}}); !out.OK {
			t.Fatalf("schedule_job: %+v", out.Error)
		}
		signals.Acquire.Pass.WaitUntil(t, func(r acquire.Result) bool { return r.Claimed == 1 && r.FiredNow == 0 })
		stop()
		if n := e.count(`select count(*) from fired_triggers where sched_name = $1`, e.ns); n != 0 {
			t.Errorf("%d fired rows left behind by a graceful stop", n)
		}
		if n := e.count(`select count(*) from triggers where sched_name = $1 and state = 'WAITING'`, e.ns); n != 1 {
			t.Error("the claimed trigger is not WAITING again")
		}
		if n := e.count(`select count(*) from scheduler_state where sched_name = $1`, e.ns); n != 0 {
			t.Error("the stopped node is still a cluster member")
		}
		e.startNode("n2", mode)
		e.startWorker("w1", nil, nil)
		e.waitFor(20*time.Second, "n2 to fire it", func() bool {
			return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) == 1
		})
	})
}

// Nodes whose lock settings differ would lock different rows and lose mutual exclusion: a node
// whose flags disagree with the running nodes' refuses to start and says why. Once no node runs,
// the settings may change.
func TestNodeWithOtherLockSettingsRefusesToStart(t *testing.T) {
	e := newEnv(t)
	signals := &node.TestSignals{}
	signals.Acquire.Pass.Init()
	stop := e.startNode("n1", func(c *node.Config) { c.LockMode, c.Partitions = "partitioned", 8; c.TestSignals = signals })
	signals.Acquire.Pass.Wait(t) // n1 has joined

	pool, err := store.Open(t.Context(), e.dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, mod := range []func(*node.Config){
		func(c *node.Config) { c.LockMode = "global" },
		func(c *node.Config) { c.LockMode, c.Partitions = "partitioned", 4 },
	} {
		cfg := node.Config{Namespace: e.ns, InstanceID: "n2", Logger: e.log}
		mod(&cfg)
		err := node.Run(t.Context(), cfg, pool, e.nc)
		if !errors.Is(err, store.ErrSettingsDiffer) || !strings.Contains(err.Error(), "--lock-mode partitioned --partitions 8") {
			t.Fatalf("a node with other lock settings: %v; want it refused, naming the running settings", err)
		}
	}
	stop()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	signals2 := &node.TestSignals{}
	signals2.Acquire.Pass.Init()
	go func() {
		done <- node.Run(ctx, node.Config{Namespace: e.ns, InstanceID: "n3", Logger: e.log, LockMode: "global", TestSignals: signals2}, pool, e.nc)
	}()
	signals2.Acquire.Pass.Wait(t) // with no node running, the settings changed
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("node with the new settings: %v", err)
	}
}

// A node the cluster declared failed while it held a claim (as after a pause past the check-in
// grace) finds out at its next check-in, stops claiming, rejoins under a new epoch, and the
// trigger fires once.
func TestDeclaredFailedNodeRejoinsAndFiresOnce(t *testing.T) {
	e := newEnv(t)
	signals := &node.TestSignals{}
	signals.Acquire.Pass.Init()
	signals.Recovery.Pass.Init()
	e.startNode("n1", func(c *node.Config) { c.FireAhead = 10 * time.Second; c.TestSignals = signals })
	e.startWorker("w1", nil, nil)
	at := time.Now().Add(4 * time.Second)
	if out := e.request("schedule_job", map[string]any{"id": "fenced", "job": job("g", "j", "noop", nil, nil),
		"triggers": []any{oneShot("g", "t", at)}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	signals.Acquire.Pass.WaitUntil(t, func(r acquire.Result) bool { return r.Claimed == 1 })
	var epoch int64
	if err := e.pool.QueryRow(t.Context(), `delete from scheduler_state where sched_name = $1 and instance_id = 'n1' returning epoch`,
		e.ns).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	signals.Recovery.Pass.WaitUntil(t, func(r recovery.Result) bool { return r.Fenced })
	if n := e.count(`select count(*) from scheduler_state where sched_name = $1 and instance_id = 'n1' and epoch > $2`, e.ns, epoch); n != 1 {
		t.Fatal("the node did not rejoin under a new epoch")
	}
	e.waitCount(20*time.Second, "the trigger's completion", 1,
		`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted)
	if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobFired); n != 1 {
		t.Fatalf("%d JobFired for one one-shot, want 1", n)
	}
}

// An execution whose worker took the fire and vanished, with no worker left to hear JetStream's
// max-deliveries advisory, has no outcome ever. Past its deadline (max-deliver attempts of the
// job's timeout plus the grace) recovery abandons it: a job that requests recovery is fired once
// more with the same fire id and recovering: true; otherwise, and the second time, it fails
// finally, and its non-concurrent job's other trigger is released.
func TestAbandonsExecutionsThatCanNoLongerFinish(t *testing.T) {
	for _, recover := range []bool{false, true} {
		t.Run(map[bool]string{false: "fails", true: "refires-then-fails"}[recover], func(t *testing.T) {
			e := newEnv(t)
			signals := &node.TestSignals{}
			signals.Recovery.Pass.Init()
			e.startNode("n1", func(c *node.Config) {
				c.CheckinInterval, c.HealEvery = 300*time.Millisecond, 1
				c.WorkerMaxDeliver, c.AbandonGrace = 1, 500*time.Millisecond
				c.TestSignals = signals
			})
			// noAbandonment waits until the execution is overdue and its JobFired on the bus, and
			// checks that three passes after that leave it alone: its fire was not handed to a worker.
			noAbandonment := func(why string) {
				t.Helper()
				e.waitCount(10*time.Second, "the fire to be overdue", 1, `select count(*) from fired_triggers
					where sched_name = $1 and state = 'EXECUTING' and fired_time < now() - interval '2 seconds'`, e.ns)
				e.waitCount(10*time.Second, "the outbox sweep to pass the fire", 1, `select count(*) from events e
					join outbox_cursor c on c.sched_name = e.sched_name
					where e.sched_name = $1 and e.type = $2 and (e.xid, e.seq) <= (c.last_xid, c.last_seq)`, e.ns, events.TypeJobFired)
				passes := signals.Recovery.Pass.Drain()
				for range 3 {
					passes = append(passes, signals.Recovery.Pass.Wait(t))
				}
				for _, r := range passes {
					if len(r.Abandoned) > 0 {
						t.Fatalf("abandoned %+v, although %s", r.Abandoned, why)
					}
				}
			}
			createConsumer := func() jetstream.Consumer {
				// A "worker" of type noop that takes fires and never settles them.
				cons, err := e.js.CreateOrUpdateConsumer(t.Context(), events.StreamFired(e.ns), jetstream.ConsumerConfig{
					Durable: events.WorkerDurable("noop"), FilterSubject: events.Subjects(e.ns).Fired("noop"),
					AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1, AckWait: time.Minute,
				})
				if err != nil {
					t.Fatal(err)
				}
				return cons
			}
			var cons jetstream.Consumer
			if recover {
				cons = createConsumer()
			}
			take := func() events.JobFired {
				t.Helper()
				msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(20*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				m, ok := <-msgs.Messages()
				if !ok {
					t.Fatalf("no JobFired delivered: %v", msgs.Error())
				}
				var jf events.JobFired
				if _, err := events.Decode(m.Data(), &jf); err != nil {
					t.Fatal(err)
				}
				return jf
			}
			at := time.Now().Add(200 * time.Millisecond)
			if out := e.request("schedule_job", map[string]any{"id": "c1",
				"job":      job("g", "j", "noop", nil, map[string]any{"timeout": "1s", "nonconcurrent": true, "requestsRecovery": recover}),
				"triggers": []any{oneShot("g", "once", at), oneShot("g", "later", at.Add(time.Second))}}); !out.OK {
				t.Fatalf("schedule_job: %+v", out.Error)
			}
			if !recover {
				noAbandonment("no worker of its type ever ran")
				cons = createConsumer()
				noAbandonment("it waits, undelivered, in the workers' consumer")
			}
			first := take()
			if first.Recovering {
				t.Fatalf("first delivery says recovering: %+v", first)
			}
			// The other trigger waits, BLOCKED by the execution that will never report.
			e.waitCount(10*time.Second, "the job's other trigger to be blocked", 1,
				`select count(*) from triggers where sched_name = $1 and trigger_name = 'later' and state = 'BLOCKED'`, e.ns)
			if recover {
				again := take()
				if again.FireID != first.FireID || !again.Recovering {
					t.Fatalf("re-fire: fire id %s recovering %v; want %s recovering true", again.FireID, again.Recovering, first.FireID)
				}
				if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobFailed); n != 0 {
					t.Fatalf("%d JobFailed before the recovering fire was abandoned too", n)
				}
			}
			signals.Recovery.Pass.WaitUntil(t, func(r recovery.Result) bool { return len(r.Abandoned) > 0 && !r.Abandoned[0].Refired })
			var final, retryable bool
			var source string
			if err := e.pool.QueryRow(t.Context(), `select (data->'error'->>'final')::bool, (data->'error'->>'retryable')::bool, source
				from events where sched_name = $1 and type = $2 and data->>'fireId' = $3`,
				e.ns, events.TypeJobFailed, first.FireID.String()).Scan(&final, &retryable, &source); err != nil {
				t.Fatalf("the abandoned execution's JobFailed: %v", err)
			}
			if !final || source != events.Source(e.ns, "n1") {
				t.Fatalf("JobFailed final=%v from %s; want final from the scheduler", final, source)
			}
			if n := e.count(`select count(*) from fired_triggers where sched_name = $1 and trigger_name = 'once'`, e.ns); n != 0 {
				t.Fatalf("%d fired rows of the abandoned execution left", n)
			}
			// The blocked trigger is free again and fires (its fire, too, is taken and never settled).
			if next := take(); next.Trigger.Name != "later" {
				t.Fatalf("after the abandonment, got %+v; want the fire of trigger later", next)
			}
		})
	}
}

// A live node whose recovery pass waits for a lock longer than the check-in grace (held here as
// a node paused inside a transaction would hold it, the idle transaction timeout lifted: with the
// harness's 1 s check-in the grace, 9.5 s, is shorter than store.IdleInTxTimeout) is not
// declared failed: its heartbeat checks in on its own.
func TestNodeWaitingForALockIsNotDeclaredFailed(t *testing.T) {
	e := newEnv(t)
	signals := map[string]*node.TestSignals{"n1": {}, "n2": {}}
	for id, s := range signals {
		s.Recovery.Pass.Init()
		e.startNode(id, func(c *node.Config) { c.TestSignals = s })
	}
	for _, s := range signals {
		s.Recovery.Pass.Wait(t)
	}
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.AllowIdle(t.Context(), tx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `select 1 from locks where sched_name = $1 and lock_name = $2 for update`,
		e.ns, store.LockStateAccess); err != nil {
		t.Fatal(err)
	}
	grace := 2*time.Second + 7500*time.Millisecond // 2 × the harness's 1 s check-in interval + 7.5 s
	time.Sleep(grace + 2*time.Second)              // how long the lock is held: the fault, not a wait for something
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	for id, s := range signals {
		for range 2 {
			if r := s.Recovery.Pass.Wait(t); len(r.FailedNodes) > 0 || r.Fenced {
				t.Fatalf("%s's pass after the lock wait: failed nodes %v, fenced %v", id, r.FailedNodes, r.Fenced)
			}
		}
	}
}

// A node that finds it was declared failed rejoins under a new epoch; if that rejoining pass
// then waits for a lock longer than the grace, its heartbeat keeps the new membership alive, so
// it is not declared failed a second time (the second 20-minute chaos run's s3-7).
func TestRejoiningNodeWaitingForALockIsNotDeclaredFailedAgain(t *testing.T) {
	e := newEnv(t)
	signals := map[string]*node.TestSignals{"n1": {}, "n2": {}}
	for id, s := range signals {
		s.Recovery.Pass.Init()
		e.startNode(id, func(c *node.Config) { c.TestSignals = s })
	}
	for _, s := range signals {
		s.Recovery.Pass.Wait(t)
	}
	// n1 is declared failed (its row goes), and the state lock is taken before its next pass.
	var epoch int64
	if err := e.pool.QueryRow(t.Context(), `delete from scheduler_state where sched_name = $1 and instance_id = 'n1' returning epoch`,
		e.ns).Scan(&epoch); err != nil {
		t.Fatal(err)
	}
	tx, err := e.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := store.AllowIdle(t.Context(), tx); err != nil { // held past the grace, as above
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `select 1 from locks where sched_name = $1 and lock_name = $2 for update`,
		e.ns, store.LockStateAccess); err != nil {
		t.Fatal(err)
	}
	// Its next pass rejoins (a new row, a new epoch) and then waits for the lock.
	e.waitCount(10*time.Second, "n1 to rejoin", 1,
		`select count(*) from scheduler_state where sched_name = $1 and instance_id = 'n1' and epoch <> $2`, e.ns, epoch)
	grace := 2*time.Second + 7500*time.Millisecond
	time.Sleep(grace + 2*time.Second) // how long the lock is held: the fault, not a wait for something
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The passes that waited end now (n1's says it was fenced: its rejoin); none may find n1,
	// or anyone, failed.
	for id, s := range signals {
		for range 3 {
			if r := s.Recovery.Pass.Wait(t); len(r.FailedNodes) > 0 {
				t.Fatalf("%s's pass after the lock wait: failed nodes %v", id, r.FailedNodes)
			}
		}
	}
	if n := e.count(`select count(*) from scheduler_state where sched_name = $1 and instance_id = 'n1' and epoch <> $2`, e.ns, epoch); n != 1 {
		t.Fatal("n1 lost its new membership")
	}
}
