package testenv

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
)

// Process returns a testing.TB for set-up that lasts as long as the test binary: the cluster a
// package's examples share, since an example gets no *testing.T. Its Cleanup functions run when
// [Main] returns, before the shared servers stop; Fatal and Fatalf panic (an example has no
// test to fail). It implements the methods this package's helpers call: Helper, Cleanup,
// Context, Name, Log, Logf, Error(f), Fatal(f).
func Process() testing.TB { return &process }

var process processTB

type processTB struct {
	testing.TB // nil: the methods below are the ones the helpers use
	mu         sync.Mutex
	cleanups   []func()
}

func (p *processTB) Helper()                  {}
func (p *processTB) Name() string             { return "process" }
func (p *processTB) Context() context.Context { return context.Background() }
func (p *processTB) Log(args ...any)          { fmt.Println(args...) }
func (p *processTB) Logf(f string, a ...any)  { fmt.Printf(f+"\n", a...) }
func (p *processTB) Error(args ...any)        { panic(fmt.Sprint(args...)) }
func (p *processTB) Errorf(f string, a ...any) {
	panic(fmt.Sprintf(f, a...))
}
func (p *processTB) Fatal(args ...any)         { panic(fmt.Sprint(args...)) }
func (p *processTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (p *processTB) Cleanup(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, f)
}

// cleanup runs the Cleanup functions, last registered first.
func (p *processTB) cleanup() {
	p.mu.Lock()
	fs := slices.Clone(p.cleanups)
	p.cleanups = nil
	p.mu.Unlock()
	for _, f := range slices.Backward(fs) {
		f()
	}
}
