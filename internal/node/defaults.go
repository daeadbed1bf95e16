package node

import (
	"github.com/agatesched/agate/internal/acquire"
	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/recovery"
	"github.com/agatesched/agate/internal/retention"
	"github.com/agatesched/agate/internal/vacuum"
)

// Defaults of Config, re-exported from the steps that own them so that the command line can show
// them without importing the steps (cmd wires through this package only).
const (
	BatchDefault            = acquire.BatchDefault
	FireAheadDefault        = acquire.FireAheadDefault
	PollIntervalDefault     = acquire.PollIntervalDefault
	MisfireThresholdDefault = acquire.MisfireThresholdDefault
	CheckinIntervalDefault  = recovery.CheckinIntervalDefault
	MaxCommandBytesDefault  = command.MaxBodyBytesDefault
	WorkerMaxDeliverDefault = recovery.WorkerMaxDeliverDefault
	WorkerJobTimeoutDefault = recovery.WorkerJobTimeoutDefault
	AbandonGraceDefault     = recovery.AbandonGraceDefault
	EventRetentionDefault   = retention.EventRetentionDefault
	SnapshotIntervalDefault = retention.SnapshotIntervalDefault
	EventBatchDefault       = outbox.EventBatchDefault
	FireBatchDefault        = outbox.FireBatchDefault
	// MaxFireBatch bounds --fire-batch: a worker given a batch again asks which of its fires
	// still run, at most 1,000 at once (the executing query's fireIds).
	MaxFireBatch          = 1000
	VacuumIntervalDefault = vacuum.IntervalDefault

	StreamReplicasDefault  = events.StreamReplicasDefault
	StreamMaxAgeDefault    = events.StreamMaxAgeDefault
	StreamMaxBytesDefault  = events.StreamMaxBytesDefault
	DuplicateWindowDefault = events.DuplicateWindowDefault

	IdempotencyWindowDefault = retention.IdempotencyWindowDefault
)

// BuiltinJobTypes returns the job types cmd/worker runs out of the box, which a node should
// accept besides any others it is configured with.
func BuiltinJobTypes() []string { return append([]string(nil), command.BuiltinJobTypes...) }
