package command

import "slices"

// Names lists the commands this version applies, sorted: internal/node serves each as an
// endpoint agate.<ns>.api.<command> of the scheduler's NATS service.
func Names() []string { return slices.Clone(known) }
