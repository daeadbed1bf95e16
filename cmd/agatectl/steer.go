package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/agatesched/agate/client"
)

// parseKey reads GROUP.NAME (split at the first dot).
func parseKey(s string) (client.Key, error) {
	g, n, ok := strings.Cut(s, ".")
	if !ok || g == "" || n == "" {
		return client.Key{}, usagef("%q is not GROUP.NAME", s)
	}
	return client.Key{Group: g, Name: n}, nil
}

// scheduleFile is what `agatectl schedule -f` reads: schedule_job bodies.
type scheduleFile struct {
	Jobs []client.ScheduleJob `json:"jobs"`
}

func newScheduleCmd(o *clusterOpts) *cobra.Command {
	var (
		file                        string
		jobKey, typ, trig           string
		cron, tz, every, at, data   string
		nonconcurrent, durable, rep bool
	)
	cmd := &cobra.Command{
		Use:   "schedule (-f FILE | --job GROUP.NAME --type TYPE (--cron EXPR | --every DURATION | --at TIME))",
		Short: "Schedule jobs and their triggers, from a file or from flags",
		Long: `Schedule jobs and their triggers (the schedule_job command).

From a file (YAML or JSON; "-" reads standard input): a list of schedule_job bodies under "jobs",
as docs/contract.md describes them. Applying a file is idempotent: each job's command id is a
hash of its definition, so the same file applied again changes nothing, and every job is sent
with replace: true, so an edited file replaces the jobs it defines.

  jobs:
    - job: {group: reports, name: daily-stats, type: http, data: {url: "http://reports.internal/run"}}
      triggers:
        - {group: reports, name: nightly, cron: {expression: "0 0 2 * * ?", timeZone: Europe/Paris}}

From flags, one job with one trigger:

  agatectl schedule --job reports.daily-stats --type noop --cron "0 0 2 * * ?" --tz Europe/Paris
  agatectl schedule --job ops.ping --type noop --every 30s
  agatectl schedule --job ops.once --type noop --at 2026-12-24T18:00:00Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var bodies []client.ScheduleJob
			if file != "" {
				var err error
				if bodies, err = readScheduleFile(cmd.InOrStdin(), file); err != nil {
					return err
				}
			} else {
				body, err := scheduleFromFlags(jobKey, typ, trig, cron, tz, every, at, data, nonconcurrent, durable, rep)
				if err != nil {
					return err
				}
				bodies = []client.ScheduleJob{body}
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var all []client.ScheduledTrigger
			for _, b := range bodies {
				ts, err := c.ScheduleJob(ctx, b)
				if err != nil {
					return fmt.Errorf("job %s.%s: %w", b.Job.Group, b.Job.Name, err)
				}
				all = append(all, ts...)
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"triggers": all})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TRIGGER\tNEXT FIRE")
			for _, t := range all {
				fmt.Fprintf(tw, "%s.%s\t%s\n", t.Group, t.Name, fmtTime(t.NextFireTime))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "YAML or JSON file of jobs (\"-\": standard input)")
	f.StringVar(&jobKey, "job", "", "the job, GROUP.NAME")
	f.StringVar(&typ, "type", "", "the job type")
	f.StringVar(&trig, "trigger", "", "the trigger, GROUP.NAME (default: the job's key)")
	f.StringVar(&cron, "cron", "", "a Quartz cron expression")
	f.StringVar(&tz, "tz", "", "time zone of --cron (default UTC)")
	f.StringVar(&every, "every", "", "fire every DURATION, forever, from now")
	f.StringVar(&at, "at", "", "fire once at an RFC 3339 time")
	f.StringVar(&data, "data", "", "job data, a JSON object")
	f.BoolVar(&nonconcurrent, "nonconcurrent", false, "one run at a time")
	f.BoolVar(&durable, "durable", false, "keep the job when it has no trigger left")
	f.BoolVar(&rep, "replace", false, "replace the job (and its trigger of that key) if it exists")
	return cmd
}

func readScheduleFile(stdin io.Reader, name string) ([]client.ScheduleJob, error) {
	var raw []byte
	var err error
	if name == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, usagef("reading %s: %v", name, err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil { // YAML is a superset of JSON
		return nil, usagef("%s is not YAML or JSON: %v", name, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, usagef("%s: %v", name, err)
	}
	var f scheduleFile
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, usagef("%s: %v (expected a list of schedule_job bodies under \"jobs\")", name, err)
	}
	if len(f.Jobs) == 0 {
		return nil, usagef("%s defines no jobs", name)
	}
	for i := range f.Jobs {
		b := &f.Jobs[i]
		b.Replace = true
		if b.ID == "" {
			def, _ := json.Marshal(b)
			sum := sha256.Sum256(def)
			b.ID = "agatectl-" + hex.EncodeToString(sum[:16])
		}
	}
	return f.Jobs, nil
}

func scheduleFromFlags(jobKey, typ, trig, cron, tz, every, at, data string, nonconcurrent, durable, replace bool) (client.ScheduleJob, error) {
	var b client.ScheduleJob
	jk, err := parseKey(jobKey)
	if err != nil {
		return b, usagef("--job: %v (or give -f FILE)", err)
	}
	if typ == "" {
		return b, usagef("--type is required")
	}
	tk := jk
	if trig != "" {
		if tk, err = parseKey(trig); err != nil {
			return b, usagef("--trigger: %v", err)
		}
	}
	b.Job = client.Job{Group: jk.Group, Name: jk.Name, Type: typ, Nonconcurrent: nonconcurrent, Durable: durable}
	b.Replace = replace
	if data != "" {
		if err := json.Unmarshal([]byte(data), &b.Job.Data); err != nil {
			return b, usagef("--data is not a JSON object: %v", err)
		}
	}
	var t client.Trigger
	switch n := btoi(cron != "") + btoi(every != "") + btoi(at != ""); {
	case n != 1:
		return b, usagef("give exactly one of --cron, --every and --at")
	case cron != "":
		t = client.Cron(tk.Group, tk.Name, cron, tz)
	case every != "":
		d, err := time.ParseDuration(every)
		if err != nil || d <= 0 {
			return b, usagef("--every %q is not a positive duration such as 30s or 1h", every)
		}
		t = client.Every(tk.Group, tk.Name, d)
	default:
		when, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return b, usagef("--at %q is not an RFC 3339 time such as 2026-12-24T18:00:00Z", at)
		}
		t = client.OneShot(tk.Group, tk.Name, when)
	}
	b.Triggers = []client.Trigger{t}
	return b, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// newPauseCmd and newResumeCmd: trigger KEY, group GROUP, all.
func newPauseResumeCmd(o *clusterOpts, pause bool) *cobra.Command {
	verb, Verb := "resume", "Resume"
	if pause {
		verb, Verb = "pause", "Pause"
	}
	cmd := &cobra.Command{
		Use:   verb + " (trigger GROUP.NAME | group GROUP | all)",
		Short: Verb + " a trigger, a trigger group, or everything",
		Long: Verb + ` a trigger, a trigger group or every group, with Quartz's semantics
(docs/contract.md, "` + verb + `_trigger", "` + verb + `_group", "` + verb + `_all").` + map[bool]string{
			true:  "\nA paused group stays paused for triggers added to it later.",
			false: "\nFire times missed while paused get the trigger's misfire instruction.",
		}[pause] + `

  agatectl ` + verb + ` trigger reports.nightly
  agatectl ` + verb + ` group reports
  agatectl ` + verb + ` all`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			what := args[0]
			if (what == "all") != (len(args) == 1) || (what != "all" && what != "trigger" && what != "group") {
				return usagef("usage: agatectl %s (trigger GROUP.NAME | group GROUP | all)", verb)
			}
			var key client.Key
			if what == "trigger" {
				var err error
				if key, err = parseKey(args[1]); err != nil {
					return err
				}
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			var res map[string]any
			switch {
			case what == "trigger" && pause:
				s, err := c.PauseTrigger(ctx, key, nil)
				res = map[string]any{"trigger": key.String(), "state": s}
				if err != nil {
					return err
				}
			case what == "trigger":
				s, err := c.ResumeTrigger(ctx, key, nil)
				res = map[string]any{"trigger": key.String(), "state": s}
				if err != nil {
					return err
				}
			default:
				var n int
				switch {
				case what == "group" && pause:
					n, err = c.PauseGroup(ctx, args[1])
				case what == "group":
					n, err = c.ResumeGroup(ctx, args[1])
				case pause:
					n, err = c.PauseAll(ctx)
				default:
					n, err = c.ResumeAll(ctx)
				}
				if err != nil {
					return err
				}
				res = map[string]any{map[bool]string{true: "paused", false: "resumed"}[pause]: n}
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), res)
			}
			switch {
			case what == "trigger" && res["state"] == "":
				fmt.Fprintf(cmd.OutOrStdout(), "%s was not paused\n", key)
			case what == "trigger":
				fmt.Fprintf(cmd.OutOrStdout(), "%s is %s\n", key, res["state"])
			default:
				for k, v := range res {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %v trigger(s)\n", k, v)
				}
			}
			return nil
		},
	}
	return cmd
}

func newTriggerCmd(o *clusterOpts) *cobra.Command {
	var data string
	cmd := &cobra.Command{
		Use:   "trigger GROUP.NAME",
		Short: "Fire a job now, once",
		Long: `Fire a job now, once, with optional extra data (the trigger_job command): a one-shot
trigger DEFAULT.MT_… is added for it. It waits while its non-concurrent job runs.

  agatectl trigger maintenance.vacuum --data '{"reason": "disk almost full"}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := parseKey(args[0])
			if err != nil {
				return err
			}
			var extra map[string]any
			if data != "" {
				if err := json.Unmarshal([]byte(data), &extra); err != nil {
					return usagef("--data is not a JSON object: %v", err)
				}
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			t, err := c.TriggerJob(ctx, key, extra)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"trigger": t})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s fires now (trigger %s.%s)\n", key, t.Group, t.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "extra data for this fire, a JSON object")
	return cmd
}

func newDeleteCmd(o *clusterOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "delete (job GROUP.NAME | trigger GROUP.NAME | calendar NAME)",
		Short: "Delete a job (with its triggers), a trigger or a calendar",
		Long: `Delete a job with its triggers (delete_job), one trigger (unschedule_trigger: a
non-durable job left without triggers goes too) or a calendar no trigger uses (delete_calendar).

  agatectl delete job reports.daily-stats
  agatectl delete trigger reports.nightly`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var key client.Key
			if args[0] != "calendar" {
				var err error
				if key, err = parseKey(args[1]); err != nil {
					return err
				}
			}
			if args[0] != "job" && args[0] != "trigger" && args[0] != "calendar" {
				return usagef("usage: agatectl delete (job GROUP.NAME | trigger GROUP.NAME | calendar NAME)")
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			switch args[0] {
			case "job":
				err = c.DeleteJob(ctx, key, nil)
			case "trigger":
				err = c.UnscheduleTrigger(ctx, key, nil)
			default:
				err = c.DeleteCalendar(ctx, args[1])
			}
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"deleted": args[0], "name": args[1]})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted %s %s\n", args[0], args[1])
			return nil
		},
	}
}

func newInterruptCmd(o *clusterOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "interrupt GROUP.NAME",
		Short: "Interrupt the runs in progress of a job",
		Long: `Ask the workers to interrupt the runs in progress of a job (interrupt_job): each such
run's handler sees its context cancelled, and the fire ends as failed and interrupted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := parseKey(args[0])
			if err != nil {
				return err
			}
			c, ctx, done, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			n, err := c.InterruptJob(ctx, key)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"executing": n})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "asked the workers to interrupt %d run(s) of %s\n", n, key)
			return nil
		},
	}
}
