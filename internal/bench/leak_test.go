package bench

import (
	"testing"

	"github.com/agatesched/agate/internal/devenv/testenv"
)

// TestMain stops the shared test servers and fails the package when its tests leave goroutines
// running.
func TestMain(m *testing.M) { testenv.Main(m) }
