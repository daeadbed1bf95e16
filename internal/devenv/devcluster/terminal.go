//go:build linux || darwin

package devcluster

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// takeTerminal makes this process the foreground process group of its terminal, so that Ctrl-C
// reaches only the dev cluster, which stops cleanly and exits 0, and not a `make dev` that
// started it: make, on SIGINT, waits for its child and then ends itself with SIGINT's status 130
// whatever the child returned. It returns a function that gives the terminal back. Without a
// terminal, or when not in the foreground, it changes nothing.
func takeTerminal() (restore func()) {
	noop := func() {}
	fd := int(os.Stdin.Fd())
	orig, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || orig != unix.Getpgrp() {
		return noop
	}
	if err := unix.Setpgid(0, 0); err != nil {
		return noop
	}
	// A background process group that sets the foreground group is sent SIGTTOU.
	signal.Ignore(unix.SIGTTOU)
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpid()); err != nil {
		return noop
	}
	return func() { _ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, orig) }
}
