package bench

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// writeRoundsSummary sums the rounds up: for each system, workload and node count the median of
// every figure over the rounds and the range of its end-to-end rate; for each Agate burst and
// peer the throughput ratio of every round (both measured in it) and their median; the intake's
// rates likewise.
func writeRoundsSummary(w io.Writer, rep Report) {
	fmt.Fprintf(w, "## Over %d rounds\n\n", rep.Rounds)
	type key struct {
		system, workload, param string
		nodes                   int
	}
	groups := map[key][]Result{}
	var order []key
	for _, r := range append(slices.Clone(rep.Results), rep.Peers...) {
		k := key{r.System, r.Workload, r.Param, r.Nodes}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	if len(order) > 0 {
		fmt.Fprintln(w, "| system | workload | size | nodes | rounds | e2e/s median (min–max) | applied/s median | fires/s median | fire late p99 ms median | start late p99 ms median | CPU a fire median | dup / missing in all |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	}
	for _, k := range order {
		rs := groups[k]
		e2e := collect(rs, func(r Result) float64 { return r.E2EPerSec })
		fires, applied := "—", "—"
		if k.system == "agate" {
			fires = f0(median(collect(rs, func(r Result) float64 { return r.FiresPerSec })))
			applied = f0(median(collect(rs, Result.AppliedPerSec)))
		}
		var dup, missing int
		for _, r := range rs {
			dup, missing = dup+r.Duplicates, missing+r.Missing
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %s (%s–%s) | %s | %s | %s | %s | %s µs | %d / %d |\n",
			k.system, k.workload, k.param, k.nodes, len(rs), f0(median(e2e)), f0(slices.Min(e2e)), f0(slices.Max(e2e)), applied, fires,
			f1(median(collect(rs, func(r Result) float64 { return r.FireLate.P99Ms }))),
			f1(median(collect(rs, func(r Result) float64 { return r.StartLate.P99Ms }))),
			f0(median(collect(rs, cpuPerFire))), dup, missing)
	}
	if len(order) > 0 {
		fmt.Fprintln(w)
	}
	writeRatiosByRound(w, rep)
	writeNodesByRound(w, rep)
	writeIntakeByRound(w, rep)
}

// writeRatiosByRound lists, for each Agate burst and each peer, Agate's end-to-end rate over the
// peer's in every round, and the median of these ratios.
func writeRatiosByRound(w io.Writer, rep Report) {
	if len(rep.Peers) == 0 {
		return
	}
	fmt.Fprintln(w, "| Agate (nodes) | peer | × throughput by round | median |")
	fmt.Fprintln(w, "|---|---|---|---|")
	var marked bool
	for _, nodes := range distinct(rep.Results, burstNodes) {
		for _, peer := range distinct(rep.Peers, func(r Result) (string, bool) { return r.System, true }) {
			var ratios []roundRatio
			for _, a := range rep.Results {
				if a.Workload != "burst" || a.Nodes != nodes {
					continue
				}
				for _, p := range rep.Peers {
					if p.System == peer && p.Round == a.Round && p.E2EPerSec > 0 {
						ratios = append(ratios, ratioOf(a, p))
					}
				}
			}
			if len(ratios) > 0 {
				marked = writeRatios(w, fmt.Sprintf("agate (%d) | %s", nodes, peer), ratios) || marked
			}
		}
	}
	writeStolenNote(w, marked)
}

// writeNodesByRound lists, for each burst's node count but the smallest, its end-to-end rate over
// the smallest count's in every round, and the median of these ratios: whether more nodes fire
// faster, round by round, as the drift between rounds allows one to tell.
func writeNodesByRound(w io.Writer, rep Report) {
	counts := distinct(rep.Results, burstNodes)
	if len(counts) < 2 {
		return
	}
	base := slices.Min(counts)
	burst := func(nodes, round int) Result {
		for _, r := range rep.Results {
			if r.Workload == "burst" && r.Nodes == nodes && r.Round == round {
				return r
			}
		}
		return Result{}
	}
	fmt.Fprintln(w, "| burst on nodes | against nodes | × e2e/s by round | median |")
	fmt.Fprintln(w, "|---|---|---|---|")
	var marked bool
	for _, nodes := range counts {
		if nodes == base {
			continue
		}
		var ratios []roundRatio
		for round := 1; round <= rep.Rounds; round++ {
			if a, b := burst(nodes, round), burst(base, round); a.E2EPerSec > 0 && b.E2EPerSec > 0 {
				ratios = append(ratios, ratioOf(a, b))
			}
		}
		if len(ratios) > 0 {
			marked = writeRatios(w, fmt.Sprintf("%d | %d", nodes, base), ratios) || marked
		}
	}
	writeStolenNote(w, marked)
}

// burstNodes is a burst's node count, for distinct; false for the other workloads.
func burstNodes(r Result) (int, bool) { return r.Nodes, r.Workload == "burst" }

// stolenFrom is the share of the cores' time the hypervisor took (Machine.StealPct) from which
// a round's ratio is marked: a neighbour then had the cores for a part of one run and not of
// the other (36 % in one run of a round where every other had under 4 %, 2026-12-02), and the
// ratio says more about the machine than about the systems.
const stolenFrom = 10.0

// roundRatio is one round's end-to-end rate of one run over another's; stolen: the hypervisor took
// stolenFrom or more of the cores' time in either run.
type roundRatio struct {
	v      float64
	stolen bool
}

// ratioOf is a's end-to-end rate over b's, which must not be 0.
func ratioOf(a, b Result) roundRatio {
	stolen := func(r Result) bool { return r.Machine != nil && r.Machine.StealPct >= stolenFrom }
	return roundRatio{v: a.E2EPerSec / b.E2EPerSec, stolen: stolen(a) || stolen(b)}
}

// writeRatios writes a table row: the cells of what is compared, the ratios by round (to two
// decimals, a stolen one marked *) and their median, with the median of the others when some are
// marked. It reports whether any was.
func writeRatios(w io.Writer, cells string, ratios []roundRatio) (marked bool) {
	each := make([]string, len(ratios))
	var all, clean []float64
	for i, r := range ratios {
		each[i] = strconv.FormatFloat(r.v, 'f', 2, 64)
		all = append(all, r.v)
		if r.stolen {
			each[i] += "*"
		} else {
			clean = append(clean, r.v)
		}
	}
	med := fmt.Sprintf("×%.2f", median(all))
	if len(clean) < len(all) && len(clean) > 0 {
		med += fmt.Sprintf(" (×%.2f without *)", median(clean))
	}
	fmt.Fprintf(w, "| %s | %s | %s |\n", cells, strings.Join(each, ", "), med)
	return len(clean) < len(all)
}

// writeStolenNote ends a table of ratios, saying what * means when a ratio was marked.
func writeStolenNote(w io.Writer, marked bool) {
	fmt.Fprintln(w)
	if marked {
		fmt.Fprintf(w, "\\* the hypervisor took %.0f %% or more of the cores' time in one of the round's runs (`/proc/stat`): the machine, more than the systems, set that ratio.\n\n", stolenFrom)
	}
}

// writeIntakeByRound lists the intake's rate of every round and its median, per path and nodes.
func writeIntakeByRound(w io.Writer, rep Report) {
	if len(rep.Intake) == 0 {
		return
	}
	type key struct {
		path  string
		nodes int
	}
	byKey := map[key][]float64{}
	var order []key
	for _, r := range rep.Intake {
		k := key{r.Path, r.Nodes}
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r.PerSec)
	}
	fmt.Fprintln(w, "| intake | nodes | commands/s by round | median |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, k := range order {
		each := make([]string, len(byKey[k]))
		for i, v := range byKey[k] {
			each[i] = f0(v)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s |\n", k.path, k.nodes, strings.Join(each, ", "), f0(median(byKey[k])))
	}
	fmt.Fprintln(w)
}

// cpuPerFire is the CPU microseconds of all processes per fire (per job for a peer), 0 when
// nothing fired.
func cpuPerFire(r Result) float64 {
	n := r.Fired
	if n == 0 {
		n = r.Completed
	}
	if n == 0 {
		return 0
	}
	return cpuTotal(r.CPU) / float64(n) * 1e6
}

func collect(rs []Result, f func(Result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// distinct lists the values f gives for the rows it accepts, each once, in first-seen order.
func distinct[T comparable](rs []Result, f func(Result) (T, bool)) []T {
	var out []T
	for _, r := range rs {
		if v, ok := f(r); ok && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// median of vs (the mean of the middle two for an even count), 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
