package webui_test

import (
	"testing"

	"github.com/agatesched/agate/internal/devenv/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
