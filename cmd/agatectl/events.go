package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/trigger"
)

// defaultEventsSince is how far back `events` reads without --since and without --follow.
const defaultEventsSince = time.Hour

func newEventsCmd(o *clusterOpts) *cobra.Command {
	var (
		follow                 bool
		since, jobKey, trigKey string
		types                  []string
	)
	short := make([]string, 0, len(client.EventTypes()))
	for _, t := range client.EventTypes() {
		short = append(short, strings.TrimPrefix(t, "agate."))
	}
	cmd := &cobra.Command{
		Use:   "events [-f] [--since DURATION | TIME | all] [--job GROUP.NAME] [--trigger GROUP.NAME] [--type TYPE]...",
		Short: "Print the namespace's events, or follow them as they happen",
		Long: `Print the events of the namespace (docs/contract.md, "Events"), read from its JetStream
streams AGATE_<ns>_EVENTS, _FIRED and _DONE: triggers scheduled, jobs fired and their outcomes,
pauses, misfires, releases, commands accepted and rejected.

Without --follow, it prints the events stored since --since (default: the last hour) and exits.
With --follow (-f), it prints the events as they are stored (a quarter of a second later) until
interrupted (Ctrl-C, exit status 0): from now, or after the stored events since --since when
given. --since takes a duration back from now (10m, 1h30m, P1D), an RFC 3339 time, or "all"
(the streams keep 7 days). Events come in the order they were stored, across the streams: a
fire before its outcome, even if the clock of the worker that dates the outcome is behind.

Filters combine:
  --job GROUP.NAME       events whose data names the job: its triggers' scheduling, its fires
                         and outcomes, the job's own events. Events about a trigger alone
                         (paused, misfired, released, ...) do not name their job: use --trigger.
  --trigger GROUP.NAME   events whose data names the trigger: its changes, fires and outcomes.
  --type TYPE            only this type; repeat it or separate types with commas. Full types
                         (agate.job.fired), short ones (job.fired) or the contract's names
                         (JobFired):
` + wrap(strings.Join(short, ", ")+".", 68, strings.Repeat(" ", 25)) + `

Each event is one line: its time (UTC), type, subject (the job or trigger, GROUP.NAME; the
command id for command events) and the telling fields of its data. With -o json, each is one
CloudEvents JSON object per line, as published, for jq and scripts.

Reading needs the producer's NATS rights of docs/contract.md, "NATS permissions".`,
		Example: `  agatectl events                                   # the last hour
  agatectl events -f                                # from now on, until Ctrl-C
  agatectl events -f --job reports.daily-stats      # one job's fires and outcomes as they happen
  agatectl events --since 24h --type job.failed     # the failures of the last day
  agatectl events --since 2026-12-01T00:00:00Z --trigger reports.nightly
  agatectl events --since 10m --type job.fired -o json | jq -r .data.fireId`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := eventsOptions(follow, since, jobKey, trigKey, types, time.Now())
			if err != nil {
				return err
			}
			// Ctrl-C is how a follow ends, so it ends well: the context ends and so does the read.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, _, done, err := o.connect(ctx)
			if err != nil {
				return err
			}
			defer done()
			stream, err := c.Events(ctx, opts)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			defer stream.Close()
			w, asJSON := cmd.OutOrStdout(), o.output == "json"
			if !asJSON {
				// Printed once the readers are in place: from here on, nothing is missed.
				if err := printEventLine(w, "TIME", "TYPE", "SUBJECT", "DETAIL"); err != nil {
					return err
				}
			}
			for ev, err := range stream.All() {
				switch {
				case errors.Is(err, context.Canceled):
					return nil
				case errors.Is(err, client.ErrMalformedEvent):
					fmt.Fprintln(cmd.ErrOrStderr(), "agatectl: skipped:", err)
					continue
				case err != nil:
					return err
				}
				if err := printEvent(w, ev, asJSON); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "print events as they are stored, until interrupted")
	f.StringVar(&since, "since", "", "from this long ago (10m, P1D), this RFC 3339 time, or all (default: 1h; with --follow, now)")
	f.StringVar(&jobKey, "job", "", "only the events of this job, GROUP.NAME")
	f.StringVar(&trigKey, "trigger", "", "only the events of this trigger, GROUP.NAME")
	f.StringSliceVar(&types, "type", nil, "only events of this type (repeatable; job.fired, trigger.scheduled, ...)")
	return cmd
}

// eventsOptions turns the flags of `events` into the client's options; now anchors --since.
func eventsOptions(follow bool, since, jobKey, trigKey string, types []string, now time.Time) (client.EventsOptions, error) {
	opts := client.EventsOptions{Follow: follow}
	switch since {
	case "":
		if follow {
			opts.NewOnly = true
		} else {
			opts.Since = now.Add(-defaultEventsSince)
		}
	case "all":
	default:
		if t, err := time.Parse(time.RFC3339Nano, since); err == nil {
			opts.Since = t
		} else if d, err := trigger.ParseDuration(since); err == nil && d > 0 {
			opts.Since = now.Add(-d)
		} else {
			return opts, usagef("--since %q is not a duration back from now (10m, 1h30m, P1D), an RFC 3339 time (2026-12-01T08:00:00Z) or all", since)
		}
	}
	for _, k := range []struct {
		flag, value string
		to          **client.Key
	}{{"--job", jobKey, &opts.Job}, {"--trigger", trigKey, &opts.Trigger}} {
		if k.value == "" {
			continue
		}
		key, err := parseKey(k.value)
		if err != nil {
			return opts, usagef("%s: %v", k.flag, err)
		}
		*k.to = &key
	}
	for _, t := range types {
		full, err := client.ParseEventType(strings.TrimSpace(t))
		if err != nil {
			return opts, usagef("--type: %v", err)
		}
		opts.Types = append(opts.Types, full)
	}
	return opts, nil
}

// printEvent writes one event: a line for people, or its CloudEvents JSON on one line.
func printEvent(w io.Writer, ev client.Event, asJSON bool) error {
	if asJSON {
		line, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encoding event %s: %w", ev.ID, err)
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	return printEventLine(w, ev.Time.UTC().Format("2006-01-02T15:04:05.000Z"), strings.TrimPrefix(ev.Type, "agate."), ev.Subject, eventDetail(ev))
}

// printEventLine writes fixed-width columns: a follow cannot wait for every row to align them.
func printEventLine(w io.Writer, at, typ, subject, detail string) error {
	_, err := fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%-24s  %-23s  %-24s  %s", at, typ, subject, detail), " "))
	return err
}

// eventDetail is the summary of an event's data, with the command of a command event, and the
// job or trigger its data names besides its subject (the job of a trigger's scheduling, the
// trigger of a fire).
func eventDetail(ev client.Event) string {
	var d struct {
		Command string      `json:"command"`
		Job     *client.Key `json:"job"`
		Trigger *client.Key `json:"trigger"`
	}
	_ = json.Unmarshal(ev.Data, &d)
	var parts []string
	if d.Command != "" {
		parts = append(parts, "command="+d.Command)
	}
	if d.Job != nil && d.Job.String() != ev.Subject {
		parts = append(parts, "job="+d.Job.String())
	}
	if d.Trigger != nil && d.Trigger.String() != ev.Subject {
		parts = append(parts, "trigger="+d.Trigger.String())
	}
	if s := summary(ev.Data); s != "" {
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// wrap breaks text into lines of at most width characters after indent.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		switch {
		case i == 0:
			b.WriteString(indent)
		case n+1+len(w) > width:
			b.WriteString("\n" + indent)
			n = 0
		default:
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
