package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	roleScheduler = "scheduler"
	roleWorker    = "worker"
	roleNATS      = "nats-server"
	rolePG        = "postgresql"
)

// BuildBinaries builds the scheduler, the worker and nats-server (a module dependency) into dir
// (internal/bench runs them too).
func BuildBinaries(ctx context.Context, dir string, log *slog.Logger) error {
	start := time.Now()
	for _, args := range [][]string{
		{"build", "-o", dir + string(os.PathSeparator),
			"github.com/agatesched/agate/cmd/scheduler", "github.com/agatesched/agate/cmd/worker"},
		{"build", "-o", filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2"},
	} {
		cmd := exec.CommandContext(ctx, "go", args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %v: %w\n%s", args, err, out)
		}
	}
	log.Info("chaos: binaries built", "dir", dir, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// proc is one OS process of the cluster under test, in its own process group.
type proc struct {
	slot    string // s1, w2, nats: what restarts keep
	role    string
	gen     int
	id      string // instance id: <slot>-<gen>
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // its exit status, once done
	// expected is set before a signal that ends the process: an exit without it is unexpected.
	expected bool
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) error {
	if p.cmd.Process == nil {
		return errors.New("not started")
	}
	// The whole group: the process and anything it started.
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// wait waits for the process to exit, up to timeout; false when it is still running.
func (p *proc) wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// supervisor starts, signals and restarts the processes, and stops them all at the end.
type supervisor struct {
	binDir, logDir string
	argsFor        func(role, id string) []string
	log            *slog.Logger

	mu         sync.Mutex
	procs      map[string]*proc // by slot
	gens       map[string]int
	all        []*proc // every process ever started
	unexpected []string
	closed     bool
}

func newSupervisor(binDir, logDir string, argsFor func(role, id string) []string, log *slog.Logger) *supervisor {
	return &supervisor{binDir: binDir, logDir: logDir, argsFor: argsFor, log: log,
		procs: map[string]*proc{}, gens: map[string]int{}}
}

// start starts the next generation of slot.
func (s *supervisor) start(slot, role string) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("supervisor closed")
	}
	s.gens[slot]++
	gen := s.gens[slot]
	id := fmt.Sprintf("%s-%d", slot, gen)
	if role == roleNATS {
		id = fmt.Sprintf("nats-%d", gen)
	}
	bin := map[string]string{roleScheduler: "scheduler", roleWorker: "worker", roleNATS: "nats-server"}[role]
	logPath := filepath.Join(s.logDir, id+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(filepath.Join(s.binDir, bin), s.argsFor(role, id)...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, so that a signal reaches it alone (and Ctrl-C in a terminal does not
	// reach it at all); killed with us if we die without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	p := &proc{slot: slot, role: role, gen: gen, id: id, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	s.procs[slot] = p
	s.all = append(s.all, p)
	go func() {
		p.err = cmd.Wait()
		s.mu.Lock()
		restart := !p.expected && !s.closed
		if restart {
			s.unexpected = append(s.unexpected, fmt.Sprintf("%s exited on its own (%v); log %s", p.id, p.err, p.logPath))
			s.log.Warn("chaos: process exited on its own; restarting it", "id", p.id, "status", p.err, "log", p.logPath)
		}
		s.mu.Unlock()
		close(p.done)
		if restart {
			// A crash is restarted like a kill, so the run goes on with its cluster whole.
			time.Sleep(time.Second)
			if _, err := s.start(p.slot, p.role); err != nil {
				s.log.Warn("chaos: restart failed", "slot", p.slot, "error", err)
			}
		}
	}()
	s.log.Debug("chaos: started", "id", id, "pid", cmd.Process.Pid, "log", logPath)
	return p, nil
}

func (s *supervisor) get(slot string) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[slot]
}

// expectExit marks p's coming exit as the injector's doing.
func (s *supervisor) expectExit(p *proc) {
	s.mu.Lock()
	p.expected = true
	s.mu.Unlock()
}

// Unexpected lists the processes that exited without being told to.
func (s *supervisor) Unexpected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.unexpected...)
}

// stopAll resumes any stopped process, sends SIGTERM to all and SIGKILL to those still running
// after timeout, and waits until every process it ever started has exited.
func (s *supervisor) stopAll(timeout time.Duration) {
	s.mu.Lock()
	s.closed = true
	all := append([]*proc(nil), s.all...)
	for _, p := range all {
		p.expected = true
	}
	s.mu.Unlock()
	for _, p := range all {
		if !p.exited() {
			_ = p.signal(syscall.SIGCONT)
			_ = p.signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(timeout)
	for _, p := range all {
		if !p.wait(time.Until(deadline)) {
			s.log.Warn("chaos: still running after SIGTERM; SIGKILL", "id", p.id, "log", p.logPath)
			_ = p.signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 nobody listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitTCP waits until something accepts connections on addr.
func WaitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after %s: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
