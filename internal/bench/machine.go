package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Machine is what the machine's CPUs did from T0 until the DONE stream held every completion,
// from /proc/stat: whether the cores were the limit of the run (little idle time left), and how
// much of them the hypervisor gave to others (steal).
type Machine struct {
	Sec       float64 `json:"sec"`
	BusyCores float64 `json:"busyCores"` // user, nice, system, irq and softirq time per second
	IdlePct   float64 `json:"idlePct"`   // idle and iowait, of all the CPUs' time
	StealPct  float64 `json:"stealPct"`
}

// cpuTicks is the first line of /proc/stat: the ticks all CPUs spent in each state.
type cpuTicks struct{ busy, idle, steal, total float64 }

// readCPUTicks reads /proc/stat; the zero cpuTicks where it cannot (not Linux).
func readCPUTicks() cpuTicks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTicks{}
	}
	return parseCPUTicks(b)
}

// parseCPUTicks reads the ticks of the first line of /proc/stat's text b; the zero cpuTicks
// when it is not such a line.
func parseCPUTicks(b []byte) cpuTicks {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return cpuTicks{}
	}
	var v [8]float64 // user nice system idle iowait irq softirq steal (guest is inside user)
	for i := range v {
		var err error
		if v[i], err = strconv.ParseFloat(string(f[i+1]), 64); err != nil {
			return cpuTicks{}
		}
	}
	t := cpuTicks{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}
	t.total = t.busy + t.idle + t.steal
	return t
}

// machineBetween is what the CPUs did between two readings sec seconds apart; nil when either
// reading failed (zero) or no time passed.
func machineBetween(from, to cpuTicks, sec float64) *Machine {
	total := to.total - from.total
	if from.total == 0 || total <= 0 || sec <= 0 {
		return nil
	}
	return &Machine{
		Sec:       sec,
		BusyCores: (to.busy - from.busy) / clockTicks / sec,
		IdlePct:   100 * (to.idle - from.idle) / total,
		StealPct:  100 * (to.steal - from.steal) / total,
	}
}

// busy is the cores busy to two places, "–" when not measured.
func (m *Machine) busy() string {
	if m == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", m.BusyCores)
}
