package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/client"
)

// jobOrTrigger reads the arguments "(job | trigger) GROUP.NAME" of command name.
func jobOrTrigger(name string, args []string) (client.Key, error) {
	if args[0] != "job" && args[0] != "trigger" {
		return client.Key{}, usagef("usage: agatectl %s (job | trigger) GROUP.NAME", name)
	}
	return parseKey(args[1])
}

func table(w io.Writer, header string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func newGetCmd(o *clusterOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "get (job | trigger) GROUP.NAME",
		Short: "Show a job (with its triggers) or a trigger",
		Long: `Show a job with its triggers (get_job) or a trigger with its schedule and state
(get_trigger). -o json prints everything, data included.

  agatectl get job reports.daily-stats
  agatectl get trigger reports.nightly -o json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := jobOrTrigger("get", args)
			if err != nil {
				return err
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			w := cmd.OutOrStdout()
			if args[0] == "job" {
				j, err := c.GetJob(ctx, key)
				if err != nil {
					return err
				}
				if o.output == "json" {
					return printJSON(w, j)
				}
				fmt.Fprintf(w, "job %s (type %s, version %d)%s\n", key, j.Type, j.Version, flags(j))
				rows := make([][]string, 0, len(j.Triggers))
				for _, t := range j.Triggers {
					rows = append(rows, []string{t.Group + "." + t.Name, t.State, fmtTime(t.NextFireTime)})
				}
				return table(w, "TRIGGER\tSTATE\tNEXT FIRE", rows)
			}
			t, err := c.GetTrigger(ctx, key)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(w, t)
			}
			return table(w, "TRIGGER\tJOB\tSTATE\tSCHEDULE\tNEXT FIRE\tPREVIOUS\tFIRED\tVERSION", [][]string{triggerRow(t)})
		},
	}
}

func flags(j client.JobInfo) string {
	var fs []string
	for _, f := range []struct {
		on   bool
		name string
	}{{j.Durable, "durable"}, {j.Nonconcurrent, "nonconcurrent"}, {j.RequestsRecovery, "requests recovery"}, {j.PersistData, "persists data"}} {
		if f.on {
			fs = append(fs, f.name)
		}
	}
	if j.Timeout != "" {
		fs = append(fs, "timeout "+j.Timeout)
	}
	if len(fs) == 0 {
		return ""
	}
	return ": " + strings.Join(fs, ", ")
}

func schedule(t client.Trigger) string {
	switch {
	case t.Cron != nil:
		return strings.TrimSpace("cron " + t.Cron.Expression + " " + t.Cron.TimeZone)
	case t.Simple != nil && t.Simple.RepeatCount == 0:
		return "once"
	case t.Simple != nil:
		return fmt.Sprintf("every %s ×%d", t.Simple.Interval, t.Simple.RepeatCount)
	case t.CalendarInterval != nil:
		return fmt.Sprintf("every %d %s", t.CalendarInterval.Interval, t.CalendarInterval.Unit)
	case t.DailyTimeInterval != nil:
		return fmt.Sprintf("every %d %s daily", t.DailyTimeInterval.Interval, t.DailyTimeInterval.Unit)
	}
	return "?"
}

func triggerRow(t client.TriggerInfo) []string {
	return []string{t.Group + "." + t.Name, t.Job.Group + "." + t.Job.Name, t.State, schedule(t.Trigger),
		fmtTime(t.NextFireTime), fmtTime(t.PreviousFireTime), fmt.Sprint(t.TimesTriggered), fmt.Sprint(t.Version)}
}

func newListCmd(o *clusterOpts) *cobra.Command {
	var group, state, typ, cursor string
	var limit int
	cmd := &cobra.Command{
		Use:   "list (jobs | triggers)",
		Short: "List jobs or triggers, with filters",
		Long: `List jobs (list_jobs) or triggers (list_triggers) in key order. A page holds --limit
items; when more follow, the last line (or nextCursor in -o json) gives the --cursor of the next.

  agatectl list triggers --state ERROR
  agatectl list jobs --group reports --type http`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "jobs" && args[0] != "triggers" {
				return usagef("usage: agatectl list (jobs | triggers)")
			}
			if args[0] == "jobs" && state != "" {
				return usagef("--state filters triggers, not jobs")
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			w, page := cmd.OutOrStdout(), client.Page{Cursor: cursor, Limit: limit}
			var next string
			if args[0] == "jobs" {
				jobs, n, err := c.ListJobs(ctx, client.JobFilter{Group: group, Type: typ, Page: page})
				if err != nil {
					return err
				}
				if o.output == "json" {
					return printJSON(w, map[string]any{"jobs": jobs, "nextCursor": n})
				}
				rows := make([][]string, 0, len(jobs))
				for _, j := range jobs {
					rows = append(rows, []string{j.Group + "." + j.Name, j.Type, strings.TrimPrefix(flags(j), ": "), fmt.Sprint(j.Version)})
				}
				if err := table(w, "JOB\tTYPE\tFLAGS\tVERSION", rows); err != nil {
					return err
				}
				next = n
			} else {
				ts, n, err := c.ListTriggers(ctx, client.TriggerFilter{Group: group, State: state, JobType: typ, Page: page})
				if err != nil {
					return err
				}
				if o.output == "json" {
					return printJSON(w, map[string]any{"triggers": ts, "nextCursor": n})
				}
				rows := make([][]string, 0, len(ts))
				for _, t := range ts {
					rows = append(rows, triggerRow(t))
				}
				if err := table(w, "TRIGGER\tJOB\tSTATE\tSCHEDULE\tNEXT FIRE\tPREVIOUS\tFIRED\tVERSION", rows); err != nil {
					return err
				}
				next = n
			}
			if next != "" {
				fmt.Fprintf(w, "more: --cursor %s\n", next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&group, "group", "", "only this group")
	f.StringVar(&state, "state", "", "only triggers in this state (WAITING, PAUSED, BLOCKED, ERROR, …)")
	f.StringVar(&typ, "type", "", "only jobs of this type")
	f.StringVar(&cursor, "cursor", "", "the page after this cursor")
	f.IntVar(&limit, "limit", 100, "items per page (at most 1000)")
	return cmd
}

func newNextCmd(o *clusterOpts) *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "next GROUP.NAME",
		Short: "Show a trigger's next fire times, its calendar applied",
		Long: `Show the next times a trigger will fire (next_fire_times), computed by the scheduler
from the trigger's stored state with its calendar applied. Nothing changes.

  agatectl next reports.nightly -n 10`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := parseKey(args[0])
			if err != nil {
				return err
			}
			if n < 1 || n > 100 {
				return usagef("-n must be between 1 and 100")
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			times, err := c.NextFireTimes(ctx, key, n)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"trigger": key, "fireTimes": times})
			}
			for _, t := range times {
				fmt.Fprintln(cmd.OutOrStdout(), t.UTC().Format(time.RFC3339Nano))
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "count", "n", 10, "how many fire times (1-100)")
	return cmd
}

func newExplainCmd(o *clusterOpts) *cobra.Command {
	var at string
	cmd := &cobra.Command{
		Use:   "explain GROUP.NAME [--at TIME]",
		Short: "Say why a trigger fired or did not: now, or at a time you expected a fire",
		Long: `Answer "why didn't it fire?" from the scheduler's rows and event log (the explain query):
paused (by which command, when), blocked by a running execution of its non-concurrent job
(which), excluded by its calendar (which), misfired (and what happened instead), not a fire
time of its schedule, claimed by a node that failed, fired but no worker runs its job type,
fired and failed or completed. Without --at it explains the trigger's present: its state, what
keeps it from firing, and its latest fire. The first line is the summary; each reason follows
with its code.

  agatectl explain reports.nightly
  agatectl explain reports.nightly --at 2026-12-25T02:00:00+01:00
  agatectl explain reports.nightly -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := parseKey(args[0])
			if err != nil {
				return err
			}
			var when *time.Time
			if at != "" {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return usagef("--at %q is not an RFC 3339 time such as 2026-12-25T02:00:00Z", at)
				}
				when = &t
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			x, err := c.Explain(ctx, key, when)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.output == "json" {
				return printJSON(w, x)
			}
			fmt.Fprintln(w, x.Summary)
			for _, r := range x.Reasons {
				fmt.Fprintf(w, "  %-22s %s\n", r.Code, r.Message)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "the time a fire was expected (RFC 3339); default: now")
	return cmd
}

func newHistoryCmd(o *clusterOpts) *cobra.Command {
	var cursor string
	var limit int
	cmd := &cobra.Command{
		Use:   "history (job | trigger) GROUP.NAME",
		Short: "Show the logged events of a job or a trigger, newest first",
		Long: `Show the event log of a job or of a trigger (history), newest first: scheduling,
fires, outcomes, pauses, misfires, releases, repairs.

  agatectl history trigger reports.nightly --limit 20`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := jobOrTrigger("history", args)
			if err != nil {
				return err
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			evs, next, err := c.History(ctx, key, args[0] == "trigger", client.Page{Cursor: cursor, Limit: limit})
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.output == "json" {
				return printJSON(w, map[string]any{"events": evs, "nextCursor": next})
			}
			rows := make([][]string, 0, len(evs))
			for _, e := range evs {
				rows = append(rows, []string{e.Time.UTC().Format(time.RFC3339Nano), strings.TrimPrefix(e.Type, "agate."), summary(e.Data)})
			}
			if err := table(w, "TIME\tEVENT\tDETAIL", rows); err != nil {
				return err
			}
			if next != "" {
				fmt.Fprintf(w, "more: --cursor %s\n", next)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cursor, "cursor", "", "the page after this cursor")
	cmd.Flags().IntVar(&limit, "limit", 50, "events per page (at most 200)")
	return cmd
}

// summary picks the telling fields of an event's data for one line.
func summary(data json.RawMessage) string {
	var d map[string]any
	_ = json.Unmarshal(data, &d)
	var parts []string
	for _, k := range []string{"scheduledTime", "nextFireTime", "state", "reason", "worker", "attempt", "error", "fireId"} {
		if v, ok := d[k]; ok && v != nil {
			if m, ok := v.(map[string]any); ok {
				v = m["message"]
			}
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

func newInstancesCmd(o *clusterOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "instances",
		Short: "Show the scheduler nodes and their last check-in",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			nodes, err := c.Instances(ctx)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"instances": nodes})
			}
			rows := make([][]string, 0, len(nodes))
			for _, n := range nodes {
				rows = append(rows, []string{n.InstanceID, n.LastCheckin.UTC().Format(time.RFC3339), n.SinceCheckin, n.CheckinInterval})
			}
			return table(cmd.OutOrStdout(), "INSTANCE\tLAST CHECK-IN\tAGO\tINTERVAL", rows)
		},
	}
}

func newWorkersCmd(o *clusterOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "workers",
		Short: "Show the worker processes and the workers of each job type",
		Long: `Show the worker processes the schedulers heard from lately, with their job types, runs in
flight and check-in age (each worker announces itself every 5 s), then what JetStream knows of
each job type's workers (the workers query): pull requests waiting (workers asking for fires
now), runs in flight, fires waiting in the stream, and when a worker last received one. WAITING
0 with fires PENDING and none IN FLIGHT means no worker takes that type.

  agatectl workers
  agatectl workers -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			workers, types, err := c.Workers(ctx)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if o.output == "json" {
				return printJSON(w, map[string]any{"workers": workers, "jobTypes": types})
			}
			rows := make([][]string, 0, len(workers))
			for _, p := range workers {
				rows = append(rows, []string{p.Instance, strings.Join(p.JobTypes, ","), fmt.Sprintf("%d/%d", p.InFlight, p.Concurrency),
					p.Started.UTC().Format(time.RFC3339), p.SinceSeen})
			}
			if err := table(w, "WORKER\tJOB TYPES\tIN FLIGHT\tSTARTED\tSEEN AGO", rows); err != nil {
				return err
			}
			fmt.Fprintln(w)
			rows = rows[:0]
			for _, t := range types {
				last := "never"
				if t.LastDelivered != nil {
					last = t.LastDelivered.UTC().Format(time.RFC3339)
				}
				rows = append(rows, []string{t.JobType, fmt.Sprint(t.Waiting), fmt.Sprint(t.InFlight), fmt.Sprint(t.Pending), last})
			}
			return table(w, "JOB TYPE\tWAITING\tIN FLIGHT\tPENDING\tLAST DELIVERED", rows)
		},
	}
}

func newCalendarsCmd(o *clusterOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "calendars",
		Short: "List the calendars",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var all []client.CalendarInfo
			for cursor := ""; ; {
				cals, next, err := c.ListCalendars(ctx, client.Page{Cursor: cursor})
				if err != nil {
					return err
				}
				all = append(all, cals...)
				if cursor = next; cursor == "" {
					break
				}
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"calendars": all})
			}
			rows := make([][]string, 0, len(all))
			for _, cal := range all {
				rows = append(rows, []string{cal.Name, string(cal.Calendar), fmt.Sprint(cal.Version)})
			}
			return table(cmd.OutOrStdout(), "CALENDAR\tDEFINITION\tVERSION", rows)
		},
	}
}
