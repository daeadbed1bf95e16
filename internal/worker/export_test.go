package worker

import "syscall"

// WithDialControl returns o with f run after the destination guard on every connection the
// default http client makes: tests refuse anything but loopback with it, so that a broken guard
// fails a test instead of reaching another host.
func WithDialControl(o BuiltinOptions, f func(network, address string, c syscall.RawConn) error) BuiltinOptions {
	o.dialControl = f
	return o
}
