package command

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// The readers answer every caller, however many more than GOMAXPROCS ask at once, each with its
// own command; a panic in prepare reaches the caller that asked, as if it had run prepare.
func TestReadersAnswerEveryCallerAndPassPanicsBack(t *testing.T) {
	h, err := New(Config{Namespace: "t"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	callers := 8 * runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Go(func() {
			id := fmt.Sprint("cmd-", i)
			body := `{"id":"` + id + `","job":{"group":"g","name":"j` + id + `","type":"noop"}}`
			var it *item
			h.readers.Run(func() { it = h.prepare(context.Background(), Request{Command: "schedule_job", Body: []byte(body)}) })
			if it.id != id || !it.applies() {
				errs <- fmt.Errorf("caller %d got item %q (early %v, rejected %v)", i, it.id, it.early, it.rej)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	broken := &Handler{} // no tracer: prepare panics
	defer func() {
		if recover() == nil {
			t.Error("prepare's panic did not reach the caller")
		}
	}()
	h.readers.Run(func() { broken.prepare(context.Background(), Request{Command: "schedule_job", Body: []byte(`{}`)}) })
}
