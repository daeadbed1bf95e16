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
	if strings.HasPrefix(err.Error(), "unknown command") {
		return 2
	}
	return exitCode(err)
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

It talks to a cluster over NATS (--nats-url, NATS_URL) through Agate's Go client, as any
producer does; every flag can also be set by the environment variable named in its help.

Exit status: 0 on success; 1 when the cluster rejected the request (the message says why);
2 when the input (arguments, flags, file, expression) is invalid; 3 when the cluster could not
be reached or was unavailable.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return flagError{fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
	})
	var o clusterOpts
	steer := []*cobra.Command{newScheduleCmd(&o), newPauseResumeCmd(&o, true), newPauseResumeCmd(&o, false),
		newTriggerCmd(&o), newDeleteCmd(&o), newInterruptCmd(&o), newGetCmd(&o), newListCmd(&o), newNextCmd(&o), newExplainCmd(&o),
		newHistoryCmd(&o), newEventsCmd(&o), newInstancesCmd(&o), newWorkersCmd(&o), newCalendarsCmd(&o)}
	for _, c := range steer {
		o.bind(c)
	}
	root.AddCommand(steer...)
	root.AddCommand(newCronCmd(now))
	cli.Setup(root, "agatectl")
	return root
}
