package localpg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runAs is the OS identity the PostgreSQL programs run as. A nil *runAs means
// "as this process".
type runAs struct {
	name     string
	uid, gid int
}

// serverUser decides who runs initdb and postgres. Both refuse to run as
// root, so when we are root (as in CI containers) they run as the `postgres`
// user that Debian's package creates.
func serverUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to run as root, but there is no `postgres` OS user "+
			"to run it as (%w); run scripts/ensure-postgres.sh or create one with `useradd --system postgres`", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("parse uid %q of user postgres: %w", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("parse gid %q of user postgres: %w", u.Gid, err)
	}
	return &runAs{name: u.Username, uid: uid, gid: gid}, nil
}

// command builds a command for one of the PostgreSQL programs, running as
// the server user when there is one.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Env = childEnv()
	// A process group of its own: Ctrl-C in a terminal signals the whole foreground group, and the
	// server must not shut itself down while its owner (`scheduler dev`, a test) still uses it; the
	// owner stops it with pg_ctl when it is done.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.owner != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(c.owner.uid), Gid: uint32(c.owner.gid)}
		// Our working directory may not be readable by the server user;
		// initdb and postgres warn or fail when they cannot go back to it.
		cmd.Dir = "/"
	}
	return cmd
}

// run executes a PostgreSQL program and returns its error together with its
// combined output, which the programs use to explain themselves.
func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := c.command(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	c.logger.DebugContext(ctx, "localpg: running", "cmd", name, "args", strings.Join(args, " "))
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// childEnv is our environment without PG* variables (PGPORT, PGDATA, … would
// silently change what pg_ctl does) and with untranslated messages, so the
// errors we pass on are the ones people search for.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

// chownTree hands dir and everything below it to the server user, so that
// a directory we created as root is usable by postgres.
func (c *Cluster) chownTree(dir string) error {
	if c.owner == nil {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, c.owner.uid, c.owner.gid); err != nil {
			return fmt.Errorf("give %s to user %s: %w", p, c.owner.name, err)
		}
		return nil
	})
}

// writeOwnedFile writes a file the server must read.
func (c *Cluster) writeOwnedFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	if c.owner != nil {
		return os.Chown(path, c.owner.uid, c.owner.gid)
	}
	return nil
}

// checkReachable makes sure the server user can get to dir: a data directory
// below a 0700 directory of root's (such as /root or t.TempDir()) would make
// initdb fail with a bare "Permission denied".
func (c *Cluster) checkReachable(dir string) error {
	if c.owner == nil {
		return nil
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok {
			mode := fi.Mode().Perm()
			searchable := mode&0o001 != 0 ||
				(int(st.Uid) == c.owner.uid && mode&0o100 != 0) ||
				(int(st.Gid) == c.owner.gid && mode&0o010 != 0)
			if !searchable {
				return fmt.Errorf("PostgreSQL runs as user %s, which cannot enter %s (mode %v); "+
					"choose a data directory it can reach (for example under /var/lib or /tmp) or `chmod o+x %s`",
					c.owner.name, p, mode, p)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// pidFile is what postmaster.pid says about a running (or crashed) server.
type pidFile struct {
	pid  int
	port int
}

// readPIDFile parses postmaster.pid; ok is false when there is none.
func readPIDFile(dataDir string) (pf pidFile, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return pidFile{}, false, nil
	}
	if err != nil {
		return pidFile{}, false, err
	}
	// Line 1 is the PID, line 4 the port (see pidfile.h).
	lines := strings.Split(string(b), "\n")
	if len(lines) > 0 {
		pf.pid, _ = strconv.Atoi(strings.TrimSpace(lines[0]))
	}
	if len(lines) > 3 {
		pf.port, _ = strconv.Atoi(strings.TrimSpace(lines[3]))
	}
	return pf, true, nil
}

// processAlive reports whether pid is a live process. Zombies count as dead:
// a postmaster killed with -9 stays a zombie when PID 1 does not reap
// (common in containers), and kill(pid, 0) alone would call it alive.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		// No procfs (not Linux): trust kill(2).
		return !errors.Is(err, fs.ErrNotExist) || !procfsAvailable()
	}
	// The state follows the parenthesised command name, which may contain spaces.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func procfsAvailable() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

// isPostgres reports whether pid runs a postgres binary, so a PID recycled by
// an unrelated process after a crash is not taken for our server.
func isPostgres(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return !procfsAvailable()
	}
	return strings.HasPrefix(strings.TrimSpace(string(b)), "postgres")
}

// childrenOf lists the PIDs whose parent is pid.
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		// After ") " come the state and the parent PID.
		fields := strings.Fields(s[i+1:])
		if len(fields) > 1 {
			if ppid, _ := strconv.Atoi(fields[1]); ppid == pid {
				kids = append(kids, p)
			}
		}
	}
	return kids
}

// waitGone polls until none of pids is alive. These processes are not our
// children, so there is nothing to wait(2) on.
func waitGone(ctx context.Context, pids []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var alive []int
		for _, p := range pids {
			if processAlive(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still alive after %s", alive, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
