package chaos

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agatesched/agate/internal/devenv/testenv"
)

// TestMain fails the package when its tests leave goroutines running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LeakOptions()...) }
