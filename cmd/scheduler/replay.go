package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/replay"
	"github.com/agatesched/agate/internal/store"
)

// exitStatus is an error that asks for a particular exit status (main uses 1 otherwise).
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string { return e.err.Error() }
func (e exitStatus) Unwrap() error { return e.err }

func replayCommand() *cobra.Command {
	var databaseURL, namespace, schema string
	var limit int
	var fromStart bool
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Rebuild a namespace's tables from its event log and diff them against the live ones",
		Long: `replay reads the event log of a namespace in order, applies every event to empty tables
in a scratch schema (agate_replay_<namespace> unless --schema is given; it is dropped and
created again, and kept afterwards for inspection), and compares them with the live tables
row by row and column by column. The log and the live tables are read in one snapshot.

Claims made ahead of time are not logged (docs/architecture.md, "The event log"): a live
ACQUIRED trigger is compared as WAITING and ACQUIRED fired rows are left out. Fires that
commit while replay reads are not seen; run it on a quiet namespace or expect the
executions in flight to show up.

Replay starts from the namespace's latest snapshot of the log's projection (nodes store one
every --snapshot-interval). --from-start ignores the snapshots and applies the whole log: when
it agrees with the live tables and the replay from the snapshot does not, the snapshot lacks an
event. It needs the log's first day, which --event-retention drops once a snapshot covers it.

Exit status: 0 the tables are what the log says; 1 they differ (the rows are printed);
2 replay could not run (the message says why).`,
		Example: `  scheduler replay --database-url postgres://agate@db/agate --namespace default
  scheduler replay --namespace billing --limit 20
  scheduler replay --namespace billing --from-start`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if databaseURL == "" {
				return exitStatus{2, errors.New("no database: set DATABASE_URL or --database-url")}
			}
			if err := events.ValidateNamespace(namespace); err != nil {
				return exitStatus{2, err}
			}
			ctx := cmd.Context()
			pool, err := store.Open(ctx, databaseURL, 2)
			if err != nil {
				return exitStatus{2, err}
			}
			defer pool.Close()
			rep, err := replay.Run(ctx, pool, namespace, replay.Options{Schema: schema, MaxDifferences: limit, FromStart: fromStart})
			if err != nil {
				return exitStatus{2, err}
			}
			printReport(cmd.OutOrStdout(), rep)
			if !rep.Equal() {
				return exitStatus{1, fmt.Errorf("the tables of namespace %s differ from its log in %d place(s)", namespace, len(rep.Differences))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&databaseURL, "database-url", "", "PostgreSQL connection URL; required")
	cli.BindEnv(f, "database-url", "DATABASE_URL")
	f.StringVar(&namespace, "namespace", "default", "the namespace to replay")
	cli.BindEnv(f, "namespace", "AGATE_NAMESPACE")
	f.StringVar(&schema, "schema", "", "scratch schema for the replayed tables (default agate_replay_<namespace>)")
	f.IntVar(&limit, "limit", 100, "most differing rows printed per table")
	f.BoolVar(&fromStart, "from-start", false, "replay the whole log, ignoring the snapshots (the log must still hold its first day)")
	return cmd
}

func printReport(w io.Writer, r replay.Report) {
	from := "the start of the log"
	if !r.Snapshot.TakenAt.IsZero() {
		from = "the snapshot of " + r.Snapshot.TakenAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "replayed %d events of namespace %s from %s into schema %s (read %s, write %s, compare %s)\n",
		r.Events, r.Namespace, from, r.Schema, r.Read.Round(time.Millisecond), r.Write.Round(time.Millisecond),
		r.Compare.Round(time.Millisecond))
	fmt.Fprintf(w, "rows: %d jobs, %d triggers, %d executions in flight, %d calendars, %d paused groups\n",
		r.Rows["job_details"], r.Rows["triggers"], r.Rows["fired_triggers"], r.Rows["calendars"], r.Rows["paused_trigger_grps"])
	if r.Equal() {
		fmt.Fprintln(w, "equal")
		return
	}
	for _, d := range r.Differences {
		fmt.Fprintln(w, d)
	}
}
