package warm

import (
	"sync"
	"testing"
	"time"
)

// Go does not wait for a function, nor does a function that runs hold up the next one; every
// function given runs once, and runs after Close too.
func TestGoRunsEachFunctionOnceWithoutWaiting(t *testing.T) {
	p := New(0, time.Minute)
	release, blocked := make(chan struct{}), make(chan struct{})
	p.Go(func() { close(blocked); <-release })
	<-blocked
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
	close(release)

	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		p.Go(func() {
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

	p.Close()
	ran = make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
}

// Run answers every caller, however many more than the pool's size ask at once, never running
// more functions at once than its size; a panic reaches the caller that gave the function.
func TestRunKeepsToTheSizeAndPassesPanicsBack(t *testing.T) {
	const size = 3
	p := New(size, time.Minute)
	var mu sync.Mutex
	running, most := 0, 0
	full := make(chan struct{}) // closed once size functions run at once
	var fullOnce sync.Once
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			p.Run(func() {
				mu.Lock()
				running++
				most = max(most, running)
				if running == size {
					fullOnce.Do(func() { close(full) })
				}
				mu.Unlock()
				<-full
				mu.Lock()
				running--
				mu.Unlock()
			})
		})
	}
	wg.Wait()
	if most != size {
		t.Errorf("%d functions ran at once, want %d", most, size)
	}

	defer func() {
		if v := recover(); v != "boom" {
			t.Errorf("recovered %v, want the function's panic", v)
		}
	}()
	p.Run(func() { panic("boom") })
}
