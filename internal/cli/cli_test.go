package cli

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// newTestCommand is a root command with one flag of each kind a binary binds.
func newTestCommand(got *struct {
	name  string
	n     int
	wait  time.Duration
	types []string
}) *cobra.Command {
	cmd := &cobra.Command{Use: "t", SilenceUsage: true, SilenceErrors: true, RunE: func(*cobra.Command, []string) error { return nil }}
	f := cmd.Flags()
	f.StringVar(&got.name, "name", "default-name", "a name")
	f.IntVar(&got.n, "n", 5, "a count")
	f.DurationVar(&got.wait, "wait", time.Second, "a wait")
	f.StringSliceVar(&got.types, "types", nil, "some types")
	BindEnv(f, "name", "T_NAME")
	BindEnv(f, "n", "T_N")
	BindEnv(f, "wait", "T_WAIT")
	BindEnv(f, "types", "T_TYPES")
	Setup(cmd, "t")
	return cmd
}

func TestFlagWinsOverEnv(t *testing.T) {
	t.Setenv("T_NAME", "from-env")
	t.Setenv("T_N", "7")
	t.Setenv("T_TYPES", "a,b")
	t.Setenv("T_WAIT", "")
	var got struct {
		name  string
		n     int
		wait  time.Duration
		types []string
	}
	cmd := newTestCommand(&got)
	cmd.SetArgs([]string{"--name", "from-flag"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.name != "from-flag" || got.n != 7 || got.wait != time.Second || strings.Join(got.types, "|") != "a|b" {
		t.Errorf("got name %q n %d wait %s types %q; want the flag's name, the environment's n and types, the default wait",
			got.name, got.n, got.wait, got.types)
	}
}

func TestInvalidEnvIsAnError(t *testing.T) {
	t.Setenv("T_WAIT", "soon")
	t.Setenv("T_N", "many")
	var got struct {
		name  string
		n     int
		wait  time.Duration
		types []string
	}
	cmd := newTestCommand(&got)
	cmd.SetArgs(nil)
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "T_WAIT") || !strings.Contains(err.Error(), "T_N") {
		t.Fatalf("error %v does not name both invalid variables", err)
	}
	// A flag given on the command line makes its variable irrelevant.
	cmd = newTestCommand(&got)
	cmd.SetArgs([]string{"--wait", "2s", "--n", "3"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("flags given, variables ignored: %v", err)
	}
}

func TestHelpShowsDefaultsNotEnvironment(t *testing.T) {
	t.Setenv("T_NAME", "secret-from-env")
	var got struct {
		name  string
		n     int
		wait  time.Duration
		types []string
	}
	cmd := newTestCommand(&got)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	if strings.Contains(help, "secret-from-env") {
		t.Errorf("--help shows the environment's value:\n%s", help)
	}
	for _, want := range []string{`a name (env T_NAME) (default "default-name")`, "(env T_TYPES)", "--version"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	var got struct {
		name  string
		n     int
		wait  time.Duration
		types []string
	}
	cmd := newTestCommand(&got)
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	// A test binary has build information with the toolchain's version but no VCS stamp.
	if !strings.HasPrefix(out.String(), "t ") || !strings.Contains(out.String(), "built with go") {
		t.Errorf("--version printed %q", out.String())
	}
}

func TestFormatVersion(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/agatesched/agate", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef"},
			{Key: "vcs.time", Value: "2026-11-23T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		}}
	want := "scheduler v0.3.0 (revision 0123456789abcdef, committed 2026-11-23T10:00:00Z, with uncommitted changes, built with go1.26.8)"
	if got := formatVersion("scheduler", info); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	info.Settings[3].Value = "false"
	if got := formatVersion("scheduler", info); strings.Contains(got, "uncommitted") {
		t.Errorf("clean tree reported as modified: %s", got)
	}
	bare := &debug.BuildInfo{}
	if got := formatVersion("worker", bare); got != "worker (devel)" {
		t.Errorf("no build details: got %q", got)
	}
}

func TestNewLogger(t *testing.T) {
	var out bytes.Buffer
	log, err := NewLogger(&out, "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown")
	if strings.Contains(out.String(), "hidden") || !strings.Contains(out.String(), "shown") {
		t.Errorf("level warn wrote %q", out.String())
	}
	if _, err := NewLogger(&out, "loud"); err == nil {
		t.Error("log level loud accepted")
	}
}
