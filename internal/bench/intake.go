package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/events"
)

// IntakeResult is one measurement of the intake workload: how fast a producer's commands are
// applied, or, for path "river", River's InsertMany on the same PostgreSQL.
type IntakeResult struct {
	Round    int     `json:"round,omitempty"` // of Config.Rounds, from 1
	Path     string  `json:"path"`            // cmd (JetStream, async publish), api (request-reply) or river
	Nodes    int     `json:"nodes"`
	Commands int     `json:"commands"`
	InFlight int     `json:"inFlight"` // publish window, requests in flight, or River's batch size
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"perSec"`
	// AppliedPerSec is N / (start → every command acknowledged, i.e. its batch committed),
	// before the outbox publishes the CommandAccepted events (cmd path only).
	AppliedPerSec float64 `json:"appliedPerSec,omitempty"`
	Rejected      int     `json:"rejected"`
	// CPU is the CPU seconds each kind of process used during the measurement: postgres (the
	// server's processes, when it is on this machine), nats-server, scheduler (all nodes) and
	// bench (the producer).
	CPU map[string]float64 `json:"cpuSeconds,omitempty"`
	// CommitsPerCommand and WritesPerCommand: pg_stat_database xact_commit and tup_inserted +
	// tup_updated + tup_deleted over the measurement, per command; Statements its top statements.
	CommitsPerCommand float64     `json:"commitsPerCommand,omitempty"`
	WritesPerCommand  float64     `json:"writesPerCommand,omitempty"`
	Statements        []Statement `json:"topStatements,omitempty"`
	// Profiles are the CPU profiles of the scheduler processes taken during it (--profile).
	Profiles []string `json:"profiles,omitempty"`
}

// runIntake measures command intake on nodes scheduler processes: the durable cmd path with
// asynchronous publishing, then the api path with requests in flight, each with a fresh set of
// jobs (one schedule_job with one one-shot trigger due in a day, so that nothing fires).
func (b *bench) runIntake(ctx context.Context, nodes int) ([]IntakeResult, error) {
	b.seq++
	dbName := fmt.Sprintf("agatebench_%d_intake_%dn", b.seq, nodes)
	ns := fmt.Sprintf("intake-%dn-%d-%d", nodes, b.seq, time.Now().Unix()%100000)
	log := b.log.With("workload", "intake", "nodes", nodes)
	dbURL, err := b.inf.createDB(ctx, dbName, b.o.PGSet)
	if err != nil {
		return nil, err
	}
	defer b.inf.dropDB(ctx, dbName, log)
	if err := b.migrate(ctx, dbURL); err != nil {
		return nil, err
	}
	cl := &cluster{ns: ns}
	defer cl.stop()
	if err := b.startSchedulers(cl, dbURL, nodes); err != nil {
		return nil, err
	}
	nc, err := nats.Connect(b.inf.natsURL, nats.Name("agatebench-producer"))
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	defer nc.Close()
	window := b.o.IntakeWindow
	// The window is kept by publishCommands; JetStream's own limit only needs to be above it.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2*window))
	if err != nil {
		return nil, err
	}
	defer deleteStreams(js, ns, log)
	if err := waitNodes(ctx, nc, dbURL, ns, nodes); err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, b.inf.dir)
	}
	log.Info("intake: scheduler processes running", "logs", b.inf.dir)
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to the workload database: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))

	pids := b.pids(cl)
	var results []IntakeResult
	for _, path := range []string{"cmd", "api"} {
		n := b.o.IntakeN
		b.inf.flushWrites(ctx, log)
		if err := b.resetStatements(ctx, admin); err != nil {
			return nil, err
		}
		dbBefore, err := readDBStats(ctx, admin)
		if err != nil {
			return nil, err
		}
		before := cpuSeconds(pids)
		profiles := b.profile(ctx, cl.pprof, fmt.Sprintf("%s-%s", ns, path))
		start := time.Now()
		var rejected int
		var appliedAt time.Time
		if path == "cmd" {
			var last atomic.Uint64
			applied := watchApplied(ctx, js, ns, last.Load)
			rejected, err = publishCommands(ctx, nc, js, ns, n, window, &last)
			appliedAt = applied()
		} else {
			rejected, err = requestCommands(ctx, nc, ns, n, b.o.IntakeInFlight)
		}
		took := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("intake %s: %w (logs in %s)", path, err, b.inf.dir)
		}
		after := cpuSeconds(pids)
		// A backend reports its statistics within a second of going idle.
		sleepUntil(ctx, time.Now().Add(1500*time.Millisecond))
		dbAfter, err := readDBStats(ctx, admin)
		if err != nil {
			return nil, err
		}
		r := IntakeResult{Path: path, Nodes: nodes, Commands: n, InFlight: window, Seconds: round1(took.Seconds()*1000) / 1000,
			PerSec: float64(n) / took.Seconds(), Rejected: rejected, CPU: map[string]float64{}, Profiles: profiles()}
		if path == "api" {
			r.InFlight = b.o.IntakeInFlight
		}
		if !appliedAt.IsZero() {
			r.AppliedPerSec = float64(n) / appliedAt.Sub(start).Seconds()
		}
		r.CPU = cpuDelta(before, after)
		r.CommitsPerCommand = float64(dbAfter.commits-dbBefore.commits) / float64(n)
		r.WritesPerCommand = float64(dbAfter.writes-dbBefore.writes) / float64(n)
		if r.Statements, err = b.topStatements(ctx, admin, n); err != nil {
			return nil, err
		}
		// The intake table has one column for all the schedulers.
		r.CPU["scheduler"] = round1(sumPrefix(r.CPU, "scheduler "))
		log.Info("intake: measured", "path", path, "commands", n, "took", took.Round(time.Millisecond),
			"per_s", int(r.PerSec), "applied_per_s", int(r.AppliedPerSec), "cpu_s", r.CPU)
		results = append(results, r)
	}
	return results, nil
}

// watchApplied watches, every 20 ms, the schedulers' command consumer until every message up
// to stream sequence last is acknowledged (a node acks a command once its batch committed); the
// returned function stops it and says when that was (zero if it was not). It asks NATS, not
// PostgreSQL, so as not to load the database it measures.
func watchApplied(ctx context.Context, js jetstream.JetStream, ns string, last func() uint64) func() time.Time {
	ctx, cancel := context.WithCancel(ctx)
	var at time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if l := last(); l > 0 {
				if cons, err := js.Consumer(ctx, events.StreamCommands(ns), command.DurableName); err == nil {
					if info, err := cons.Info(ctx); err == nil && info.AckFloor.Stream >= l {
						at = time.Now()
						return
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() time.Time {
		// All are acknowledged before every event was seen, unless the run failed.
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
		cancel()
		<-done
		return at
	}
}

// intakeBody is command i of a run: job intake.<prefix>-<i> with one one-shot trigger due in a
// day.
func intakeBody(prefix string, i int, at string) []byte {
	return fmt.Appendf(nil, `{"id":"%s-%d","job":{"group":"intake","name":"%s-%d","type":"noop"},`+
		`"triggers":[{"group":"intake","name":"%s-%d","startAt":"%s","simple":{"repeatCount":0}}]}`,
		prefix, i, prefix, i, prefix, i, at)
}

// publishCommands publishes n schedule_job commands on the cmd subject asynchronously, at most
// window unacknowledged by JetStream, and returns once a CommandAccepted or CommandRejected
// event was seen for each (the rejected count).
func publishCommands(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, ns string, n, window int, last *atomic.Uint64) (int, error) {
	var accepted, rejected atomic.Int64
	seen := make(map[string]bool, n)
	var mu sync.Mutex
	all := make(chan struct{})
	sub, err := nc.Subscribe(events.Subjects(ns).Evt("command"), func(m *nats.Msg) {
		bodies, err := events.Bodies(m.Header, m.Data) // a node's commands of one transaction share a message
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, body := range bodies {
			var data struct {
				CommandID string `json:"commandId"`
			}
			env, err := events.Decode(body, &data)
			if err != nil || seen[data.CommandID] || !strings.HasPrefix(data.CommandID, "c-") {
				continue // not an outcome of these commands, or one published again: a duplicate
			}
			seen[data.CommandID] = true
			if env.Type == events.TypeCommandRejected {
				rejected.Add(1)
			}
			if accepted.Add(1) == int64(n) {
				close(all)
			}
		}
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return 0, err
	}
	at := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	subject := events.Subjects(ns).Command("schedule_job")
	acks := make(chan jetstream.PubAckFuture, window)
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		var maxSeq uint64
		// The watcher looks once every command is stored: at the highest sequence of them.
		defer func() { last.Store(maxSeq) }()
		for f := range acks {
			select {
			case ack := <-f.Ok():
				maxSeq = max(maxSeq, ack.Sequence)
			case err := <-f.Err():
				errc <- fmt.Errorf("publishing a command: %w", err)
				for range acks { // let the publisher finish
				}
				return
			}
		}
	}()
	for i := range n {
		f, err := js.PublishAsync(subject, intakeBody("c", i, at))
		if err != nil {
			close(acks)
			return 0, fmt.Errorf("publishing a command: %w", err)
		}
		acks <- f // blocks while window publishes wait for their acknowledgement
	}
	close(acks)
	if err := <-errc; err != nil {
		return 0, err
	}
	select {
	case <-all:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("only %d of %d commands answered after 5 minutes", accepted.Load(), n)
	}
	return int(rejected.Load()), nil
}

// requestCommands sends n schedule_job commands on the api subject, inFlight at once, and
// returns the rejected count.
func requestCommands(ctx context.Context, nc *nats.Conn, ns string, n, inFlight int) (int, error) {
	at := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	subject := events.Subjects(ns).API("schedule_job")
	var next, rejected atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	for range inFlight {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				msg, err := nc.RequestWithContext(ctx, subject, intakeBody("a", i, at))
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					return
				}
				var out struct {
					OK bool `json:"ok"`
				}
				if err := json.Unmarshal(msg.Data, &out); err != nil || !out.OK {
					rejected.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return int(rejected.Load()), <-errs
}

// cpuSeconds is the CPU time (user + system, including reaped children) of each group of
// processes, from /proc.
func cpuSeconds(pids map[string][]int) map[string]float64 {
	out := map[string]float64{}
	for k, ps := range pids {
		for _, p := range ps {
			out[k] += procCPU(p)
		}
		if k == "postgres" && len(ps) > 0 {
			// Backends come and go: add the live children of the postmaster (ps[0]).
			for _, c := range childPIDs(ps[0]) {
				out[k] += procCPU(c)
			}
		}
	}
	return out
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// procCPU is utime + stime + cutime + cstime of pid in seconds, 0 when it cannot be read.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0
	}
	var total float64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14-17)
		v, _ := strconv.ParseFloat(f[i], 64)
		total += v
	}
	return total / clockTicks
}

// childPIDs lists the processes whose parent is pid.
func childPIDs(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// postmasterPIDs is the postmaster of the data directory (the first line of postmaster.pid),
// when the file names the server the bench is connected to: its port, and its start time within
// a second of started (Unix seconds; the file and pg_postmaster_start_time take the time at two
// moments of the start). A server elsewhere may have the same data directory's path as one
// here; nil then, and when the file cannot be read.
func postmasterPIDs(dataDir, port string, started int64) []int {
	if dataDir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return nil
	}
	// postmaster.pid: PID, data directory, start time, port, then sockets, address, shared memory, status.
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 || strings.TrimSpace(lines[3]) != port {
		return nil
	}
	if t, err := strconv.ParseInt(strings.TrimSpace(lines[2]), 10, 64); err != nil || max(t-started, started-t) > 1 {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		return nil
	}
	return []int{pid}
}

// postgresPIDs is PostgreSQL's postmaster when the server is on this machine (see
// postmasterPIDs), nil otherwise.
func (inf *infra) postgresPIDs() []int {
	return postmasterPIDs(inf.pgDataDir, inf.settings["port"], inf.pgStarted)
}

// profile starts a CPU profile of each process (through its pprof listener) for the
// measurement about to start; the returned function waits for them and lists the files written.
// Profiles last --profile-seconds. nats-server's is taken with the cluster's.
func (b *bench) profile(ctx context.Context, targets []pprofTarget, name string) func() []string {
	if len(targets) > 0 && b.inf.natsPprof != nil {
		targets = append(slices.Clip(targets), *b.inf.natsPprof)
	}
	if len(targets) == 0 {
		return func() []string { return nil }
	}
	if b.o.Rounds > 1 {
		name = fmt.Sprintf("r%d-%s", b.round, name)
	}
	var wg sync.WaitGroup
	files := make([]string, len(targets))
	for i, t := range targets {
		path := filepath.Join(b.o.Profile, fmt.Sprintf("%s-%s.pprof", name, t.name))
		wg.Go(func() {
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", t.addr, b.o.ProfileSeconds)
			if err := fetchTo(ctx, url, path); err != nil {
				b.log.Warn("CPU profile failed", "process", t.name, "error", err)
				return
			}
			files[i] = path
		})
	}
	return func() []string {
		wg.Wait()
		return slices.DeleteFunc(files, func(f string) bool { return f == "" })
	}
}

func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// runRiver measures River's InsertMany on a fresh database of the same server with the runner
// in internal/bench/river (a module of its own, built with go build), in its insert mode.
func (b *bench) runRiver(ctx context.Context) (IntakeResult, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return IntakeResult{}, errors.New("cannot locate internal/bench/river")
	}
	dir := filepath.Join(filepath.Dir(file), "river")
	b.seq++
	dbName := fmt.Sprintf("agatebench_%d_river", b.seq)
	dbURL, err := b.inf.createDB(ctx, dbName, nil)
	if err != nil {
		return IntakeResult{}, err
	}
	defer b.inf.dropDB(ctx, dbName, b.log)
	pids := map[string][]int{}
	if p := b.inf.postgresPIDs(); p != nil {
		pids["postgres"] = p
	}
	// Built first, so that the measurement is not the compiler's.
	exe := filepath.Join(os.TempDir(), "agatebench-river")
	build := exec.CommandContext(ctx, "go", "build", "-o", exe, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		return IntakeResult{}, fmt.Errorf("building %s: %w\n%s", dir, err, out)
	}
	b.inf.flushWrites(ctx, b.log)
	before := cpuSeconds(pids)
	out, err := exec.CommandContext(ctx, exe, "--mode", "insert", "--database-url", dbURL, "--n", strconv.Itoa(b.o.IntakeN),
		"--batch", "1000", "--concurrency", "2").Output()
	if err != nil {
		return IntakeResult{}, fmt.Errorf("river --mode insert: %w", err)
	}
	after := cpuSeconds(pids)
	var res struct {
		Jobs       int     `json:"jobs"`
		Batch      int     `json:"batch"`
		Seconds    float64 `json:"seconds"`
		JobsPerSec float64 `json:"jobsPerSec"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return IntakeResult{}, fmt.Errorf("river --mode insert printed %q: %w", out, err)
	}
	r := IntakeResult{Path: "river", Commands: res.Jobs, InFlight: res.Batch, Seconds: res.Seconds, PerSec: res.JobsPerSec}
	if len(pids) > 0 {
		r.CPU = map[string]float64{"postgres": round1(after["postgres"] - before["postgres"])}
	}
	b.log.Info("intake: River InsertMany measured", "jobs", res.Jobs, "per_s", int(res.JobsPerSec))
	return r, nil
}

func writeIntakeTable(w io.Writer, results []IntakeResult) {
	fmt.Fprintln(w, "| intake | nodes | commands | in flight | seconds | commands/s | rejected | commits / writes per command | CPU s: postgres / nats-server / scheduler / bench |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		what := map[string]string{"cmd": "cmd (JetStream, async publish)", "api": "api (request-reply)",
			"river": "River v0.51.1 InsertMany (batch, 2 at once)"}[r.Path]
		nodes := strconv.Itoa(r.Nodes)
		if r.Path == "river" {
			nodes = "—"
		}
		perCmd := "—"
		if r.Path != "river" {
			perCmd = fmt.Sprintf("%.3f / %.2f", r.CommitsPerCommand, r.WritesPerCommand)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.2f | %s | %d | %s | %s / %s / %s / %s |\n", what, nodes, r.Commands, r.InFlight,
			r.Seconds, f0(r.PerSec), r.Rejected, perCmd, f1(r.CPU["postgres"]), f1(r.CPU["nats-server"]), f1(r.CPU["scheduler"]), f1(r.CPU["bench"]))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Each command is one schedule_job with one one-shot trigger due in a day. cmd: commands/s = N / (first publish → CommandAccepted seen for all);"+
		" api: N / (first request → last reply). Scheduler processes are the built binaries; nats-server is its own process.")
	fmt.Fprintln(w)
	for _, r := range results {
		if len(r.Statements) > 0 {
			fmt.Fprintf(w, "%s, %d node(s): ", r.Path, r.Nodes)
			writeStatements(w, r.Statements, "command")
		}
	}
}
