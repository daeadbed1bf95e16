package bench

import (
	"testing"

	"github.com/agatesched/agate/internal/devenv/testenv"
)

// TestMain stops the shared PostgreSQL after the tests and fails the package when they leave
// goroutines running.
func TestMain(m *testing.M) { testenv.Main(m) }
