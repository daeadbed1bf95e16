package cli

import (
	"os"
	"runtime/debug"
)

// GCPercentDefault is the garbage collector's target of the scheduler and the worker when GOGC
// is not set.
const GCPercentDefault = 400

// TuneGC sets the garbage collector's target to GCPercentDefault unless the environment sets
// GOGC. Both binaries keep a small live heap (tens of MB) and allocate for every message: at
// Go's default of 100 the collector took about a sixth of a scheduler's CPU in the intake
// benchmark, a fifth less at 400, for a heap that peaks at five times the live one. GOGC and
// GOMEMLIMIT in the environment apply as usual.
func TuneGC() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(GCPercentDefault)
	}
}
