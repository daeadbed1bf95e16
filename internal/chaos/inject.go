package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"
)

// FaultKind is what the injector does.
type FaultKind string

const (
	FaultKill  FaultKind = "kill -9"
	FaultTerm  FaultKind = "SIGTERM"
	FaultStop  FaultKind = "SIGSTOP/SIGCONT"
	FaultNATS  FaultKind = "restart nats-server"
	FaultPG    FaultKind = "pg_ctl restart -m immediate"
	FaultStart FaultKind = "start a new scheduler"
)

// plannedFault is one fault of the seeded plan.
type plannedFault struct {
	At    time.Duration // from the start of the load window
	Kind  FaultKind
	Role  string // scheduler or worker for signals
	Pick  int    // which of the candidate processes (modulo their number)
	Pause time.Duration
}

// FaultRecord is what the injector did, for the report and the checker.
type FaultRecord struct {
	At     time.Time
	End    time.Time // when the fault was over (process back, server up)
	Offset time.Duration
	Kind   FaultKind
	Role   string
	Target string // instance id, nats-<gen> or postgresql
	Detail string
}

func (f FaultRecord) String() string {
	s := fmt.Sprintf("+%-7s %-28s %s", f.Offset.Round(100*time.Millisecond), f.Kind, f.Target)
	if f.Detail != "" {
		s += " (" + f.Detail + ")"
	}
	return s
}

// planFaults draws the faults of a window from the seed: n faults, the i-th at a random point of
// the i-th slot of length every, so that their number is fixed; the first ones cover every kind
// once (in a random order), the rest are drawn by weight.
func planFaults(rng *rand.Rand, start, window, every, stopFor time.Duration) []plannedFault {
	kinds := []struct {
		kind   FaultKind
		role   string
		weight int
	}{
		{FaultKill, roleScheduler, 3}, {FaultKill, roleWorker, 3},
		{FaultTerm, roleScheduler, 2}, {FaultTerm, roleWorker, 2},
		{FaultStop, roleScheduler, 3},
		{FaultNATS, roleNATS, 1}, {FaultPG, rolePG, 1},
		{FaultStart, roleScheduler, 2},
	}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	first := rng.Perm(len(kinds))
	var out []plannedFault
	for i := 0; ; i++ {
		at := start + time.Duration((float64(i)+0.15+0.7*rng.Float64())*float64(every))
		if at > start+window {
			break
		}
		var k int
		if i < len(first) {
			k = first[i]
		} else {
			w := rng.IntN(total)
			for k = 0; w >= kinds[k].weight; k++ {
				w -= kinds[k].weight
			}
		}
		f := plannedFault{At: at, Kind: kinds[k].kind, Role: kinds[k].role, Pick: rng.IntN(1 << 20)}
		switch f.Kind {
		case FaultStop:
			f.Pause = stopFor + time.Duration(rng.IntN(2000))*time.Millisecond
		case FaultNATS, FaultPG:
			f.Pause = time.Duration(300+rng.IntN(2700)) * time.Millisecond // time down
		default:
			f.Pause = time.Duration(300+rng.IntN(1700)) * time.Millisecond // before the restart
		}
		out = append(out, f)
	}
	return out
}

// injector carries out the plan against the cluster.
type injector struct {
	c      *cluster
	t0     time.Time
	mu     sync.Mutex
	busy   map[string]bool // slots a fault in progress holds
	faults []FaultRecord
	extras []string // slots of schedulers started by FaultStart, oldest first
	next   int      // number of the next extra scheduler slot
	wg     sync.WaitGroup
}

func (in *injector) record(f FaultRecord) {
	in.mu.Lock()
	in.faults = append(in.faults, f)
	in.mu.Unlock()
	in.c.log.Info("chaos: fault", "fault", f.String())
}

// Records returns the faults done, in the order they were injected.
func (in *injector) Records() []FaultRecord {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := slices.Clone(in.faults)
	slices.SortFunc(out, func(a, b FaultRecord) int { return a.At.Compare(b.At) })
	return out
}

// pick chooses a process of role not held by another fault, starting from the plan's choice;
// it marks its slot busy.
func (in *injector) pick(role string, n int) *proc {
	in.mu.Lock()
	defer in.mu.Unlock()
	slots := in.c.slots(role)
	for i := range slots {
		slot := slots[(n+i)%len(slots)]
		if in.busy[slot] {
			continue
		}
		p := in.c.sup.get(slot)
		if p == nil || p.exited() {
			continue
		}
		in.busy[slot] = true
		return p
	}
	return nil
}

func (in *injector) release(slot string) {
	in.mu.Lock()
	delete(in.busy, slot)
	in.mu.Unlock()
}

// run injects the plan, then waits until every fault is over (processes restarted or resumed,
// servers up).
func (in *injector) run(ctx context.Context, plan []plannedFault) {
	defer in.wg.Wait()
	for _, f := range plan {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(in.t0.Add(f.At))):
		}
		in.wg.Go(func() { in.do(ctx, f) })
	}
}

func (in *injector) do(ctx context.Context, f plannedFault) {
	c := in.c
	now := time.Now()
	rec := FaultRecord{At: now, Offset: now.Sub(in.t0), Kind: f.Kind, Role: f.Role}
	switch f.Kind {
	case FaultKill, FaultTerm, FaultStop:
		p := in.pick(f.Role, f.Pick)
		if p == nil {
			c.log.Info("chaos: fault skipped, no free target", "kind", f.Kind, "role", f.Role)
			return
		}
		defer in.release(p.slot)
		rec.Target = p.id
		rec.At = time.Now()
		rec.Offset = rec.At.Sub(in.t0)
		switch f.Kind {
		case FaultStop:
			_ = p.signal(syscall.SIGSTOP)
			rec.Detail = "resumed after " + f.Pause.Round(100*time.Millisecond).String()
			sleep(ctx, f.Pause)
			_ = p.signal(syscall.SIGCONT)
		case FaultKill:
			c.sup.expectExit(p)
			_ = p.signal(syscall.SIGKILL)
			<-p.done
			rec.Detail = in.restart(ctx, p, f.Pause)
		case FaultTerm:
			c.sup.expectExit(p)
			_ = p.signal(syscall.SIGTERM)
			if !p.wait(30 * time.Second) {
				_ = p.signal(syscall.SIGKILL)
				<-p.done
			}
			rec.Detail = in.restart(ctx, p, f.Pause)
		}
	case FaultNATS:
		in.mu.Lock()
		for in.busy["nats"] {
			in.mu.Unlock()
			sleep(ctx, 100*time.Millisecond)
			in.mu.Lock()
		}
		in.busy["nats"] = true
		in.mu.Unlock()
		defer in.release("nats")
		rec.Target = c.sup.get("nats").id
		rec.Detail = c.restartNATS(ctx, f.Pause)
	case FaultPG:
		rec.Target = rolePG
		in.mu.Lock()
		for in.busy["pg"] {
			in.mu.Unlock()
			sleep(ctx, 100*time.Millisecond)
			in.mu.Lock()
		}
		in.busy["pg"] = true
		in.mu.Unlock()
		defer in.release("pg")
		if err := c.pg.RestartImmediate(context.WithoutCancel(ctx), f.Pause); err != nil {
			rec.Detail = "restart failed: " + err.Error()
			c.log.Error("chaos: PostgreSQL did not come back", "error", err)
		} else {
			rec.Detail = "down " + f.Pause.Round(100*time.Millisecond).String()
		}
	case FaultStart:
		in.mu.Lock()
		var retire string
		if len(in.extras) >= c.cfg.MaxExtraSchedulers {
			retire = in.extras[0]
			if in.busy[retire] {
				retire = ""
			} else {
				in.extras = in.extras[1:]
				in.busy[retire] = true
			}
		}
		in.next++
		slot := fmt.Sprintf("s%d", c.cfg.Schedulers+in.next)
		in.extras = append(in.extras, slot)
		in.busy[slot] = true
		in.mu.Unlock()
		if retire != "" {
			if p := c.sup.get(retire); p != nil && !p.exited() {
				c.sup.expectExit(p)
				_ = p.signal(syscall.SIGTERM)
				if !p.wait(30 * time.Second) {
					_ = p.signal(syscall.SIGKILL)
					<-p.done
				}
				rec.Detail = "retired " + p.id + " with SIGTERM first"
			}
			c.removeSlot(retire)
			in.release(retire)
		}
		c.addSlot(slot)
		p, err := c.sup.start(slot, roleScheduler)
		in.release(slot)
		if err != nil {
			rec.Detail = err.Error()
			break
		}
		rec.Target = p.id
	}
	rec.End = time.Now()
	in.record(rec)
}

// restart starts p's slot again after pause, unless the run is ending.
func (in *injector) restart(ctx context.Context, p *proc, pause time.Duration) string {
	sleep(ctx, pause)
	if ctx.Err() != nil {
		return "not restarted: the run is ending"
	}
	np, err := in.c.sup.start(p.slot, p.role)
	if err != nil {
		return "restart failed: " + err.Error()
	}
	return fmt.Sprintf("restarted as %s after %s", np.id, pause.Round(100*time.Millisecond))
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
