package bench

import "testing"

func TestMachineBetweenReadsProcStat(t *testing.T) {
	from := parseCPUTicks([]byte("cpu  1000 0 500 3000 100 0 50 10 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"))
	// 2 s on 2 CPUs: 400 ticks, of which 300 busy, 60 idle, 20 iowait, 20 steal.
	to := parseCPUTicks([]byte("cpu  1200 0 580 3060 120 0 70 30 0 0\n"))
	m := machineBetween(from, to, 2)
	if m == nil || m.BusyCores != 1.5 || m.IdlePct != 20 || m.StealPct != 5 {
		t.Fatalf("machine between the readings: %+v; want 1.5 cores busy, 20 %% idle, 5 %% steal", m)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3", "cpu a b c d e f g h i"} {
		if got := parseCPUTicks([]byte(bad)); got != (cpuTicks{}) {
			t.Errorf("%q parsed as CPU ticks %+v", bad, got)
		}
	}
	if m := machineBetween(to, to, 2); m != nil {
		t.Errorf("no ticks between the readings gave %+v, want nil", m)
	}
	if m := machineBetween(cpuTicks{}, to, 2); m != nil {
		t.Errorf("a failed first reading gave %+v, want nil", m)
	}
}
