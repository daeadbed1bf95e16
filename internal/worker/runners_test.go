package worker

import (
	"sync"
	"testing"
)

func TestRunnersRunEachFunctionOnceWithoutWaiting(t *testing.T) {
	done := make(chan struct{})
	r := newRunners(done)

	// A function that runs does not hold up the next: it goes to another runner.
	release, blocked := make(chan struct{}), make(chan struct{})
	r.Go(func() { close(blocked); <-release })
	<-blocked
	ran := make(chan struct{})
	r.Go(func() { close(ran) })
	<-ran
	close(release)

	// Many functions, some on runners already idle: each runs once.
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		r.Go(func() {
			defer wg.Done()
			mu.Lock()
			counts[i]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range 200 {
		if counts[i] != 1 {
			t.Fatalf("function %d ran %d times", i, counts[i])
		}
	}

	// Once done is closed, idle runners end, and a function given later still runs.
	close(done)
	ran = make(chan struct{})
	r.Go(func() { close(ran) })
	<-ran
}
