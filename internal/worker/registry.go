package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync"

	"github.com/agatesched/agate/internal/events"
)

// Job is one run of one fire, as a handler sees it.
type Job struct {
	// JobFired is the decoded event: FireID, Job (group, name, type), Trigger, Data (job data
	// merged with trigger data), ScheduledTime, Recovering, Timeout, …
	events.JobFired
	// Attempt is 1 for the first delivery of the fire and grows with each redelivery (JetStream's
	// NumDelivered), so a handler can tell a retry from a first run.
	Attempt int
	// Logger is the worker's logger with the job, fire id and attempt attached.
	Logger *slog.Logger

	out *output
}

// output is what a run hands back besides its error.
type output struct {
	data json.RawMessage
}

// SetData hands back new job data (a JSON object, which replaces the job's own data) with the
// run's completion. A job scheduled with persistData (Quartz's PersistJobDataAfterExecution)
// stores it, so its next run sees it; make such a job nonconcurrent so runs do not race. Data
// set by a run that fails is not stored.
func (j Job) SetData(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding job data: %w", err)
	}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("job data must be a JSON object, got %.20s", b)
	}
	if j.out == nil {
		return errors.New("SetData called on a Job the worker did not hand out")
	}
	j.out.data = b
	return nil
}

// HandlerFunc runs one job. It must honour ctx: it is cancelled at the job's timeout. A nil
// return completes the fire; an error fails this attempt and is retried unless it is wrapped
// with Permanent or the attempts are used up. A panic is recovered and counts as a failure.
type HandlerFunc func(ctx context.Context, job Job) error

var jobTypePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidateJobType checks a job type name: it becomes the last token of a NATS subject and part
// of a durable consumer name, so only 1-64 letters, digits, '_' and '-' are allowed.
func ValidateJobType(jobType string) error {
	if !jobTypePattern.MatchString(jobType) {
		return fmt.Errorf("job type %q is invalid: use 1-64 letters, digits, '_' or '-'", jobType)
	}
	return nil
}

// Registry maps job types to handlers. It is safe for concurrent use, but a Worker reads the
// types once, in Run: register everything before starting it.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]HandlerFunc
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: make(map[string]HandlerFunc)}
}

// Register adds the handler of a job type. Handlers are registered by code at start-up with
// constant names, so a bad name, a nil handler or a second handler for the same type is a
// programming error and panics rather than being reported at run time.
func (r *Registry) Register(jobType string, h HandlerFunc) {
	if err := ValidateJobType(jobType); err != nil {
		panic("worker.Registry.Register: " + err.Error())
	}
	if h == nil {
		panic(fmt.Sprintf("worker.Registry.Register: nil handler for job type %q", jobType))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[jobType]; dup {
		panic(fmt.Sprintf("worker.Registry.Register: job type %q is already registered", jobType))
	}
	r.handlers[jobType] = h
}

// Types returns the registered job types, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	types := make([]string, 0, len(r.handlers))
	for t := range r.handlers {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// Handler returns the handler of a job type.
func (r *Registry) Handler(jobType string) (HandlerFunc, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[jobType]
	return h, ok
}

// Permanent marks err as not worth retrying (bad job data, a request the target refuses): the
// worker then publishes JobFailed{final:true} at once instead of redelivering the fire.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
