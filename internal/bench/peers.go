package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PeerResult is one peer's figures on the burst workload.
type PeerResult struct {
	Peer    string `json:"peer"` // "river" or "quartz"
	Version string `json:"version"`
	// Jobs all due at T0; Procs are River's worker processes or Quartz's scheduler JVMs.
	Jobs  int `json:"jobs"`
	Procs int `json:"procs"`
	// Seconds is T0 → every job completed in the database; PerSec = Jobs / Seconds.
	Seconds float64 `json:"seconds"`
	PerSec  float64 `json:"perSec"`
	// Lateness: an execution's start − T0.
	P50Ms      float64 `json:"p50Ms"`
	P99Ms      float64 `json:"p99Ms"`
	MaxMs      float64 `json:"maxMs"`
	Duplicates int     `json:"duplicates"`
	Missing    int     `json:"missing"`
	// CPU is the CPU seconds used from T0 to the end of the measurement by PostgreSQL
	// ("postgres", when the server is on this machine: infra.postgresPIDs) and by the peer's
	// processes ("river" or "quartz").
	CPU map[string]float64 `json:"cpuSeconds,omitempty"`
	// Machine is what the machine's CPUs did from T0 until every job completed.
	Machine *Machine `json:"machine,omitempty"`
}

// ErrPeerUnavailable says a peer cannot run on this machine: java, javac or the Quartz jars are
// missing.
var ErrPeerUnavailable = errors.New("peer unavailable: install Java and Quartz with " +
	"apt-get install -y default-jdk-headless libquartz2-java libpostgresql-jdbc-java libc3p0-java libslf4j-java")

// javaDir is where Debian's Java library packages put their jars.
const javaDir = "/usr/share/java"

// quartzJars is the Quartz harness's class path: Quartz, its connection pool, the JDBC driver
// and the logging it needs.
var quartzJars = []string{"quartz2.jar", "c3p0.jar", "postgresql.jar", "slf4j-api.jar", "slf4j-simple.jar"}

// harnessDir is the directory of a peer's harness in this source tree.
func harnessDir(peer string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate internal/bench/%s", peer)
	}
	return filepath.Join(filepath.Dir(file), peer), nil
}

// runRiverBurst runs the burst workload on River v0.51.1: n jobs due at one instant, a no-op
// worker in procs processes (internal/bench/river --mode burst, built first).
func (b *bench) runRiverBurst(ctx context.Context, n, procs int) (PeerResult, error) {
	dir, err := harnessDir("river")
	if err != nil {
		return PeerResult{}, err
	}
	b.seq++
	dbName := fmt.Sprintf("agatebench_%d_river_burst", b.seq)
	dbURL, err := b.inf.createDB(ctx, dbName, nil)
	if err != nil {
		return PeerResult{}, err
	}
	defer b.inf.dropDB(ctx, dbName, b.log)
	// A directory of its own: another run on the machine may be building the same binary.
	bin, err := os.MkdirTemp("", "agatebench-river-")
	if err != nil {
		return PeerResult{}, err
	}
	defer os.RemoveAll(bin)
	exe := filepath.Join(bin, "river")
	build := exec.CommandContext(ctx, "go", "build", "-o", exe, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		return PeerResult{}, fmt.Errorf("building %s (River comes from the Go module proxy): %w\n%s", dir, err, out)
	}
	timeout := max(b.o.Timeout, 2*time.Minute)
	cmd := exec.CommandContext(ctx, exe, "--mode", "burst", "--database-url", dbURL, "--n", strconv.Itoa(n),
		"--procs", strconv.Itoa(procs), "--lead", "5s", "--timeout", timeout.String())
	return b.runPeer(ctx, cmd, "river", n, procs)
}

// runQuartzBurst runs the burst workload on Quartz 2.3.2 clustered: n one-shot triggers due at
// one instant on nodes scheduler JVMs (internal/bench/quartz, compiled first with javac against
// Debian's jars). It returns ErrPeerUnavailable when Java or the jars are missing.
func (b *bench) runQuartzBurst(ctx context.Context, n, nodes int) (PeerResult, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return PeerResult{}, fmt.Errorf("%w (java not found)", ErrPeerUnavailable)
	}
	javac, err := exec.LookPath("javac")
	if err != nil {
		return PeerResult{}, fmt.Errorf("%w (javac not found)", ErrPeerUnavailable)
	}
	cp := make([]string, len(quartzJars))
	for i, jar := range quartzJars {
		cp[i] = filepath.Join(javaDir, jar)
		if _, err := os.Stat(cp[i]); err != nil {
			return PeerResult{}, fmt.Errorf("%w (%s missing)", ErrPeerUnavailable, cp[i])
		}
	}
	dir, err := harnessDir("quartz")
	if err != nil {
		return PeerResult{}, err
	}
	sources, err := filepath.Glob(filepath.Join(dir, "src", "agatebench", "*.java"))
	if err != nil || len(sources) == 0 {
		return PeerResult{}, fmt.Errorf("no Java sources in %s/src/agatebench", dir)
	}
	b.seq++
	dbName := fmt.Sprintf("agatebench_%d_quartz_burst", b.seq)
	dbURL, err := b.inf.createDB(ctx, dbName, nil)
	if err != nil {
		return PeerResult{}, err
	}
	defer b.inf.dropDB(ctx, dbName, b.log)
	jdbc, user, password, err := jdbcURL(dbURL)
	if err != nil {
		return PeerResult{}, err
	}
	classes, err := os.MkdirTemp("", "agatebench-quartz-classes-")
	if err != nil {
		return PeerResult{}, err
	}
	defer os.RemoveAll(classes)
	args := append([]string{"-nowarn", "-d", classes, "-cp", strings.Join(cp, ":")}, sources...)
	if out, err := exec.CommandContext(ctx, javac, args...).CombinedOutput(); err != nil {
		return PeerResult{}, fmt.Errorf("compiling the Quartz harness in %s: %w\n%s", dir, err, out)
	}
	timeout := max(b.o.Timeout, 10*time.Minute)
	cmd := exec.CommandContext(ctx, java, "-cp", classes+":"+strings.Join(cp, ":"), "agatebench.Burst",
		"--jdbc-url", jdbc, "--n", strconv.Itoa(n), "--nodes", strconv.Itoa(nodes),
		"--lead-ms", "5000", "--timeout-ms", strconv.FormatInt(timeout.Milliseconds(), 10))
	cmd.Env = append(os.Environ(), "QUARTZ_DB_USER="+user, "QUARTZ_DB_PASSWORD="+password)
	return b.runPeer(ctx, cmd, "quartz", n, nodes)
}

// jdbcURL turns a postgres:// URL into PgJDBC's URL and the user and password, which the
// harness reads from its environment rather than its command line.
func jdbcURL(dbURL string) (jdbc, user, password string, err error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", "", "", fmt.Errorf("parsing database URL: %w", err)
	}
	if u.User != nil {
		user = u.User.Username()
		password, _ = u.User.Password()
	}
	jdbc = "jdbc:postgresql://" + u.Host + u.Path
	if u.RawQuery != "" {
		jdbc += "?" + u.RawQuery
	}
	return jdbc, user, password, nil
}

// runPeer runs a peer's harness, which prints its figures as one JSON object, and samples the
// CPU time of PostgreSQL and of the harness's processes at T0 and once all jobs completed, as
// the harness marks them on its standard error ("@pids", "@t0", "@done").
func (b *bench) runPeer(ctx context.Context, cmd *exec.Cmd, peer string, n, procs int) (PeerResult, error) {
	log := b.log.With("workload", "burst", "peer", peer, "procs", procs)
	b.inf.flushWrites(ctx, log) // as before an Agate workload's T0
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return PeerResult{}, err
	}
	// On cancellation the harness gets SIGTERM and time to stop its child processes.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		return PeerResult{}, fmt.Errorf("starting the %s harness: %w", peer, err)
	}
	log.Info("burst: peer harness started", "jobs", n)

	var mu sync.Mutex
	pids := map[string][]int{}
	if p := b.inf.postgresPIDs(); p != nil {
		pids["postgres"] = p
	}
	var atT0, atDone map[string]float64
	var ticksT0, ticksDone cpuTicks // the machine's, at the same moments
	var t0At, doneAt time.Time
	var t0Timer *time.Timer
	var tail []string // the harness's other output, for an error message
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) > 1 && f[0] == "@pids":
			mu.Lock()
			for _, s := range f[1:] {
				if p, err := strconv.Atoi(s); err == nil {
					pids[peer] = append(pids[peer], p)
				}
			}
			mu.Unlock()
		case len(f) == 2 && f[0] == "@t0":
			ms, _ := strconv.ParseInt(f[1], 10, 64)
			t0Timer = time.AfterFunc(time.Until(time.UnixMilli(ms)), func() {
				mu.Lock()
				defer mu.Unlock()
				atT0 = cpuSeconds(pids)
				ticksT0 = readCPUTicks()
				t0At = time.Now()
			})
		case len(f) == 1 && f[0] == "@done":
			mu.Lock()
			atDone = cpuSeconds(pids)
			ticksDone = readCPUTicks()
			doneAt = time.Now()
			mu.Unlock()
		default:
			if tail = append(tail, line); len(tail) > 40 {
				tail = tail[1:]
			}
		}
	}
	err = cmd.Wait()
	if t0Timer != nil {
		t0Timer.Stop()
	}
	if err != nil {
		return PeerResult{}, fmt.Errorf("the %s burst harness failed: %w\n%s", peer, err, strings.Join(tail, "\n"))
	}
	var out struct {
		River, Quartz       string
		Jobs, Procs         int
		Seconds, JobsPerSec float64
		P50Ms, P99Ms, MaxMs float64
		Duplicates, Missing int
		TimedOut            bool
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return PeerResult{}, fmt.Errorf("the %s burst harness printed %q: %w", peer, stdout.String(), err)
	}
	r := PeerResult{Peer: peer, Version: out.River + out.Quartz, Jobs: out.Jobs, Procs: out.Procs, Seconds: out.Seconds,
		PerSec: out.JobsPerSec, P50Ms: out.P50Ms, P99Ms: out.P99Ms, MaxMs: out.MaxMs, Duplicates: out.Duplicates, Missing: out.Missing}
	mu.Lock()
	if atT0 != nil && atDone != nil {
		r.CPU = map[string]float64{}
		for k := range pids {
			r.CPU[k] = round1(atDone[k] - atT0[k])
		}
		r.Machine = machineBetween(ticksT0, ticksDone, doneAt.Sub(t0At).Seconds())
	}
	mu.Unlock()
	if out.TimedOut {
		return r, fmt.Errorf("%s burst: not every job completed within the timeout (%d missing)", peer, r.Missing)
	}
	log.Info("burst: peer measured", "per_s", int(r.PerSec), "p50_ms", r.P50Ms, "p99_ms", r.P99Ms,
		"duplicates", r.Duplicates, "missing", r.Missing, "cpu_s", r.CPU)
	return r, nil
}
