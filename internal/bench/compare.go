package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// comparePeers runs the burst on River and Quartz (--compare) and returns their rows, and why a
// peer was skipped. A peer that is not installed is skipped; one that fails is an error.
func (b *bench) comparePeers(ctx context.Context) (rows []Result, skipped []string, err error) {
	n, procs := b.o.BurstN, b.o.CompareProcs
	for _, peer := range []struct {
		name string
		run  func(context.Context, int, int) (PeerResult, error)
	}{{"river", b.runRiverBurst}, {"quartz", b.runQuartzBurst}} {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		b.log.Info("compare: running the burst on a peer", "peer", peer.name, "n", n, "procs", procs)
		r, err := peer.run(ctx, n, procs)
		if errors.Is(err, ErrPeerUnavailable) {
			b.log.Warn("compare: peer skipped", "peer", peer.name, "reason", err)
			skipped = append(skipped, fmt.Sprintf("%s: %v", peer.name, err))
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("compare: %s: %w", peer.name, err)
		}
		b.log.Info("compare: peer measured", "peer", peer.name, "per_s", int(r.PerSec), "p99_ms", int(r.P99Ms),
			"dup", r.Duplicates, "missing", r.Missing)
		rows = append(rows, r.result())
	}
	return rows, skipped, nil
}

// result is a peer's run as a row of the report. A peer has no fire event apart from the start
// of its job, so its e2e/s is jobs / (T0 → all completed) and its start lateness is the job's
// start − T0.
func (p PeerResult) result() Result {
	late := Lateness{P50Ms: p.P50Ms, P99Ms: p.P99Ms, MaxMs: p.MaxMs}
	return Result{
		System: p.Peer + " " + p.Version, Workload: "burst", Param: fmt.Sprintf("N=%d at T0", p.Jobs), Nodes: p.Procs,
		Workers: p.Procs, Expected: p.Jobs, Completed: p.Jobs - p.Missing, Completions: p.Jobs - p.Missing,
		E2EPerSec: p.PerSec, StartLate: late, E2ELate: late, Duplicates: p.Duplicates, Missing: p.Missing,
		AllCompletedAfterT0Sec: p.Seconds, CPU: p.CPU, Machine: p.Machine,
	}
}

// writeComparison writes Agate's burst beside each peer's, as ratios (> 1: Agate is better).
func writeComparison(w io.Writer, rep Report) {
	fmt.Fprintln(w, "### Side by side: the burst on Agate and its peers, in this run")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Agate (nodes) | peer (processes) | Agate e2e/s | peer jobs/s | × throughput | Agate applied/s | × applied | Agate start p99 ms | peer start p99 ms | × p99 | CPU s: Agate's postgres / all | peer's postgres / all | cores busy: Agate / peer |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, a := range rep.Results {
		if a.Workload != "burst" {
			continue
		}
		for _, p := range rep.Peers {
			fmt.Fprintf(w, "| agate (%d) | %s (%d) | %s | %s | ×%s | %s | ×%s | %s | %s | ×%s | %s / %s | %s / %s | %s / %s |\n",
				a.Nodes, p.System, p.Nodes, f0(a.E2EPerSec), f0(p.E2EPerSec), ratio(a.E2EPerSec, p.E2EPerSec),
				f0(a.AppliedPerSec()), ratio(a.AppliedPerSec(), p.E2EPerSec),
				f1(a.StartLate.P99Ms), f1(p.StartLate.P99Ms), ratio(p.StartLate.P99Ms, a.StartLate.P99Ms),
				f1(a.CPU["postgres"]), f1(cpuTotal(a.CPU)), f1(p.CPU["postgres"]), f1(cpuTotal(p.CPU)),
				a.Machine.busy(), p.Machine.busy())
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Peers run the same burst (N jobs due at one instant, a no-op job) with harnesses in internal/bench/river "+
		"(River at FetchCooldown 1ms, FetchPollInterval 10ms, MaxWorkers 100, ANALYZE before T0) and internal/bench/quartz "+
		"(Quartz clustered JobStoreTX, batch 50, 10 threads), on the same PostgreSQL, after Agate's workloads. "+
		"A peer's CPU counts its processes and PostgreSQL from T0 to all completed. "+
		"Cores busy: the machine's, whatever ran on them, from T0 to the last completion (/proc/stat). "+
		"Agate applied/s counts to when the schedulers had also applied every completion (a peer's completion is its database row).")
	if len(rep.PeersSkipped) > 0 {
		fmt.Fprintf(w, "Skipped: %s.\n", strings.Join(rep.PeersSkipped, "; "))
	}
	fmt.Fprintln(w)
}

// ratio is a / b to two significant places, "–" when b is 0.
func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	r := a / b
	if r >= 10 {
		return f0(r)
	}
	return fmt.Sprintf("%.2f", r)
}

func cpuTotal(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}
