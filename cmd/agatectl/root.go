package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/cli"
)

// usageError marks errors caused by the caller's input: they exit with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// run executes agatectl with args and returns the process exit status. now is read only when
// --from is not given.
func run(args []string, stdout, stderr io.Writer) int {
	return runAt(args, stdout, stderr, time.Now)
}

func runAt(args []string, stdout, stderr io.Writer, now func() time.Time) int {
	root := newRootCmd(now)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "agatectl:", err)
	var ue usageError
	if errors.As(err, &ue) || isFlagError(err) || strings.HasPrefix(err.Error(), "unknown command") {
		return 2
	}
	return 1
}

// isFlagError recognises cobra's own argument and flag errors, which are usage errors too.
func isFlagError(err error) bool {
	var fe flagError
	return errors.As(err, &fe)
}

type flagError struct{ error }

func newRootCmd(now func() time.Time) *cobra.Command {
	root := &cobra.Command{
		Use:   "agatectl",
		Short: "Operate and inspect an Agate scheduler",
		Long: `agatectl is the command line for Agate, a clustered job scheduler with Quartz semantics.

Exit status: 0 on success, 2 when the input (arguments, flags, expression) is invalid,
1 for any other failure.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return flagError{fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
	})
	root.AddCommand(newCronCmd(now))
	cli.Setup(root, "agatectl")
	return root
}
