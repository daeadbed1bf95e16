package node_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/replay"
	"github.com/agatesched/agate/internal/worker"
)

// TestReplayAfterRandomHistories drives two nodes and a worker through random sequences of
// commands (every kind, valid or not), fires, completions, failures, retries, pauses,
// interrupts and node and worker restarts, and checks that the tables are what the log says
// (replayed from a snapshot of the projection taken while everything ran): at random points
// while everything runs (replay reads the log and the tables in one snapshot, and every
// transaction writes its rows and its events together) and after the nodes stopped.
// AGATE_REPLAY_SEED replays one sequence.
func TestReplayAfterRandomHistories(t *testing.T) {
	seeds := []uint64{uint64(time.Now().UnixNano()), 1, 2}
	if s := os.Getenv("AGATE_REPLAY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AGATE_REPLAY_SEED=%q: %v", s, err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("rerun with AGATE_REPLAY_SEED=%d", seed)
			h := &history{e: newEnv(t), rng: rand.New(rand.NewPCG(seed, seed))}
			h.run(100)
		})
	}
}

type history struct {
	e      *env
	rng    *rand.Rand
	n      int // commands sent, for their ids
	stopN2 func()
	killW  func()
}

func (h *history) pick(n int) int { return h.rng.IntN(n) }

func (h *history) key(prefix string, n int) map[string]any {
	return map[string]any{"group": fmt.Sprintf("%sg%d", prefix, h.pick(2)), "name": fmt.Sprintf("%s%d", prefix, h.pick(n))}
}

// propHandler ends a run as its fire id says: failed for good, failed for another attempt,
// completed with new job data, or completed after a while (long enough to be interrupted).
func propHandler(ctx context.Context, j worker.Job) error {
	switch j.FireID[15] % 6 {
	case 0:
		return worker.Permanent(errors.New("failed for good"))
	case 1:
		if j.Attempt < 2 {
			return errors.New("failed, try again")
		}
	case 2:
		return j.SetData(map[string]any{"seen": j.FireID.String()})
	case 3:
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return nil
}

func (h *history) nodeConfig(c *node.Config) {
	c.JobTypes = append(node.BuiltinJobTypes(), "prop")
	c.LockMode, c.Partitions = "partitioned", 4
	c.MisfireThreshold = 500 * time.Millisecond
}

func (h *history) startWorker() func() {
	return h.e.startWorker("w", func(c *worker.Config) { c.MaxDeliver = 3 },
		map[string]worker.HandlerFunc{"prop": propHandler})
}

func (h *history) run(steps int) {
	e := h.e
	e.startNode("n1", h.nodeConfig)
	h.stopN2 = e.startNode("n2", h.nodeConfig)
	h.killW = h.startWorker()
	for i := range steps {
		h.step()
		switch i % 10 {
		case 4:
			// Replay starts from the latest snapshot, taken while everything runs.
			if _, err := replay.TakeSnapshot(h.e.t.Context(), h.e.pool, h.e.ns); err != nil {
				h.e.t.Fatalf("snapshot: %v", err)
			}
		case 9:
			h.checkReplay()
		}
	}
	h.checkReplay()
	h.e.t.Logf("the history logged: %s", h.e.eventCounts())
}

// checkReplay replays the log while the nodes run.
func (h *history) checkReplay() {
	t := h.e.t
	rep, err := replay.Run(t.Context(), h.e.pool, h.e.ns, replay.Options{})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	for _, d := range rep.Differences {
		t.Errorf("replay differs after %d commands: %s", h.n, d)
	}
	if !rep.Equal() {
		t.FailNow()
	}
}

func (h *history) send(cmd string, body map[string]any) {
	h.n++
	body["id"] = fmt.Sprintf("p%d", h.n)
	h.e.request(cmd, body) // accepted or rejected: both are part of a history
}

func (h *history) trigger() map[string]any {
	tr := h.key("t", 6)
	now := time.Now()
	switch h.pick(4) {
	case 0:
		tr["startAt"] = now.Add(time.Duration(h.pick(400)) * time.Millisecond).UTC().Format(time.RFC3339Nano)
		tr["simple"] = map[string]any{"repeatCount": 0}
	case 1:
		tr["startAt"] = now.Add(time.Duration(h.pick(300)) * time.Millisecond).UTC().Format(time.RFC3339Nano)
		tr["simple"] = map[string]any{"interval": fmt.Sprintf("%dms", 100+h.pick(300)), "repeatCount": h.pick(6)}
	case 2:
		tr["cron"] = map[string]any{"expression": "* * * * * ?"}
		tr["misfire"] = []string{"smart_policy", "fire_once_now", "do_nothing", "ignore_misfire_policy"}[h.pick(4)]
	default:
		tr["startAt"] = now.Add(-time.Duration(1+h.pick(3)) * time.Second).UTC().Format(time.RFC3339Nano)
		tr["simple"] = map[string]any{"interval": "1s", "repeatCount": -1}
	}
	if h.pick(4) == 0 {
		tr["calendar"] = "cal"
	}
	if h.pick(3) == 0 {
		tr["data"] = map[string]any{"t": h.pick(10)}
	}
	return tr
}

func (h *history) job(durable bool) map[string]any {
	j := h.key("j", 4)
	j["type"] = "prop"
	j["durable"] = durable
	j["nonconcurrent"] = h.pick(2) == 0
	j["persistData"] = h.pick(3) == 0
	j["requestsRecovery"] = h.pick(2) == 0
	if h.pick(3) == 0 {
		j["data"] = map[string]any{"j": h.pick(10)}
	}
	return j
}

func (h *history) calendar() map[string]any {
	today := time.Now().UTC().Format("2006-01-02")
	if h.pick(2) == 0 {
		return map[string]any{"type": "holiday", "dates": []string{today}}
	}
	return map[string]any{"type": "weekly", "days": []string{[]string{"MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"}[h.pick(7)]}}
}

// step sends one random command, restarts a node or the worker, or lets time pass.
func (h *history) step() {
	switch h.pick(22) {
	case 0, 1, 2, 3:
		triggers := []any{h.trigger()}
		if h.pick(3) == 0 {
			triggers = append(triggers, h.trigger())
		}
		h.send("schedule_job", map[string]any{"job": h.job(h.pick(4) == 0), "triggers": triggers, "replace": h.pick(3) == 0})
	case 4:
		h.send("add_job", map[string]any{"job": h.job(true), "replace": h.pick(2) == 0})
	case 5:
		h.send("schedule_trigger", map[string]any{"job": h.key("j", 4), "trigger": h.trigger()})
	case 6:
		h.send("reschedule_trigger", map[string]any{"trigger": h.key("t", 6), "newTrigger": h.trigger()})
	case 7:
		h.send("unschedule_trigger", map[string]any{"trigger": h.key("t", 6)})
	case 8:
		h.send("delete_job", map[string]any{"job": h.key("j", 4)})
	case 9:
		h.send("pause_trigger", map[string]any{"trigger": h.key("t", 6)})
	case 10:
		h.send("resume_trigger", map[string]any{"trigger": h.key("t", 6)})
	case 11:
		h.send("pause_group", map[string]any{"group": h.key("t", 6)["group"]})
	case 12:
		h.send("resume_group", map[string]any{"group": h.key("t", 6)["group"]})
	case 13:
		h.send([]string{"pause_all", "resume_all"}[h.pick(2)], map[string]any{})
	case 14:
		h.send("trigger_job", map[string]any{"job": h.key("j", 4), "data": map[string]any{"now": true}})
	case 15:
		h.send("add_calendar", map[string]any{"name": "cal", "calendar": h.calendar(), "replace": true})
	case 16:
		h.send("interrupt_job", map[string]any{"job": h.key("j", 4)})
	case 17:
		h.send("delete_calendar", map[string]any{"name": "cal"})
	case 18:
		h.stopN2()
		h.stopN2 = h.e.startNode("n2", h.nodeConfig)
	case 19:
		h.killW()
		h.killW = h.startWorker()
	default:
		// Time passes: triggers come due, fire, complete, misfire while paused.
		time.Sleep(time.Duration(100+h.pick(700)) * time.Millisecond)
	}
}
