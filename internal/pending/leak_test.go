package pending

import (
	"testing"

	"github.com/agatesched/agate/internal/devenv/testenv"
)

// TestMain runs the tests with testenv, which fails the package when they leave goroutines
// running.
func TestMain(m *testing.M) { testenv.Main(m) }
