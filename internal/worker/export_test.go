package worker

import "syscall"

// WithDialControl returns o with f run after the destination guard on every connection the
// default http client makes: tests refuse anything but loopback with it, so that a broken guard
// fails a test instead of reaching another host.
func WithDialControl(o BuiltinOptions, f func(network, address string, c syscall.RawConn) error) BuiltinOptions {
	o.dialControl = f
	return o
}

// AfterStore has f run each time a message of w's outcomes is stored (n outcomes in it), before
// their fires are acked: a test stops the worker there.
func AfterStore(w *Worker, f func(n int)) { w.afterStore = f }

// QueuedOutcomes is how many of w's outcomes wait for the message being stored.
func QueuedOutcomes(w *Worker) int {
	w.outcomes.mu.Lock()
	defer w.outcomes.mu.Unlock()
	return len(w.outcomes.queue)
}
