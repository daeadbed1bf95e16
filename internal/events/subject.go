package events

import (
	"fmt"
	"regexp"
)

var namespacePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidateNamespace checks a namespace against docs/contract.md's pattern.
func ValidateNamespace(ns string) error {
	if !namespacePattern.MatchString(ns) {
		return fmt.Errorf("namespace %q is invalid: use 1-64 letters, digits, '_' or '-'", ns)
	}
	return nil
}

// Subjects builds the NATS subjects of one namespace (docs/contract.md, "Subjects").
type Subjects string

// Command is agate.<ns>.cmd.<command>.
func (s Subjects) Command(cmd string) string { return "agate." + string(s) + ".cmd." + cmd }

// API is agate.<ns>.api.<name>: a command or a query, request-reply.
func (s Subjects) API(name string) string { return "agate." + string(s) + ".api." + name }

// ServiceName is the name of a namespace's NATS service (nats.go's micro): its schedulers
// answer $SRV.PING, $SRV.INFO and $SRV.STATS, and $SRV.<verb>.agate-<ns>[.<id>], for the api
// endpoints. The namespace in the name lets permissions keep discovery within a namespace.
func ServiceName(ns string) string { return "agate-" + ns }

// Fired is agate.<ns>.fired.<jobType>.
func (s Subjects) Fired(jobType string) string { return "agate." + string(s) + ".fired." + jobType }

// Done is agate.<ns>.done.<jobType>.
func (s Subjects) Done(jobType string) string { return "agate." + string(s) + ".done." + jobType }

// Evt is agate.<ns>.evt.<kind>.
func (s Subjects) Evt(kind string) string { return "agate." + string(s) + ".evt." + kind }

// WorkerPresence is agate.<ns>.presence.worker, where each worker announces itself (core NATS,
// no stream: presence is now, not history).
func (s Subjects) WorkerPresence() string { return "agate." + string(s) + ".presence.worker" }

// All is the wildcard of one of the families above, e.g. All("fired") = agate.<ns>.fired.>.
func (s Subjects) All(family string) string { return "agate." + string(s) + "." + family + ".>" }

// Stream names (docs/contract.md): AGATE_<ns>_COMMANDS, _FIRED, _DONE, _EVENTS.
func StreamCommands(ns string) string { return "AGATE_" + ns + "_COMMANDS" }

// StreamFired names the stream of JobFired messages.
func StreamFired(ns string) string { return "AGATE_" + ns + "_FIRED" }

// WorkerDurablePrefix begins the name of every workers' durable consumer on the FIRED stream.
const WorkerDurablePrefix = "worker-"

// WorkerDurable names the durable consumer on the FIRED stream that all workers of a job type
// share; schedulers read its state to tell a fire still queued from one handed to a worker.
func WorkerDurable(jobType string) string { return WorkerDurablePrefix + jobType }

// StreamDone names the stream of completion messages.
func StreamDone(ns string) string { return "AGATE_" + ns + "_DONE" }

// StreamEvents names the stream of every other event.
func StreamEvents(ns string) string { return "AGATE_" + ns + "_EVENTS" }
