package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/trigger"
)

func newCronCmd(now func() time.Time) *cobra.Command {
	cron := &cobra.Command{
		Use:   "cron",
		Short: "Work with Quartz cron expressions",
		Long: `Work with cron expressions in Quartz's dialect, the one Agate's cron triggers use:

  seconds minutes hours day-of-month month day-of-week [year]

One of day-of-month and day-of-week must be '?'. Fields take numbers, ranges (1-5), lists
(1,3,5), steps (0/15, 3-59/5), '*', names (JAN-DEC, SUN-SAT), and in the day fields
L (last), L-n, LW, nW (nearest weekday), n#k (k-th weekday n) and nL (last weekday n).`,
	}
	cron.Args = cobra.ArbitraryArgs
	cron.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %q (see '%s --help')", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return cmd.Help()
	}
	cron.AddCommand(newCronExplainCmd(now))
	return cron
}

type explainOutput struct {
	Expression string   `json:"expression"`
	TimeZone   string   `json:"timeZone"`
	Next       []string `json:"next"`
}

// maxExplainCount bounds -n so that a typo cannot produce gigabytes of output.
const maxExplainCount = 100000

func newCronExplainCmd(now func() time.Time) *cobra.Command {
	var (
		tz     string
		from   string
		count  int
		output string
	)
	cmd := &cobra.Command{
		Use:   "explain EXPRESSION",
		Short: "Print the next times a cron expression fires",
		Long: `Print the next times a Quartz cron expression fires after a given instant, computed
exactly as Agate's scheduler (and Quartz 2.3.2) computes them, in the given time zone: a time
that falls in a daylight-saving gap is skipped, and in a fall-back overlap only the second
occurrence fires.

Times are printed in RFC 3339 with the zone's offset (Z for UTC), one per line, or as one JSON
object with -o json:

  {"expression": "...", "timeZone": "...", "next": ["2026-12-01T02:00:00+08:00", ...]}

Fewer than -n times (or none) are printed when the schedule ends, for example when its year
field runs out. An invalid expression prints the reason and where it is on standard error and
exits with status 2.`,
		Example: `  agatectl cron explain "0 0/15 9-17 ? * MON-FRI" --tz Europe/Paris -n 5
  agatectl cron explain "0 0 2 L * ?" --tz Asia/Shanghai --from 2026-12-01T00:00:00Z -o json
  agatectl cron explain "0 30 2 * * ?" --tz America/New_York --from 2026-03-07T00:00:00-05:00 -n 3`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("cron explain takes exactly one argument, the expression (quote it), got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			expr := args[0]
			ce, err := trigger.ParseCron(expr)
			if err != nil {
				return usagef("invalid cron expression %q: %w", expr, err)
			}
			loc, err := time.LoadLocation(tz)
			if err != nil || tz == "" || tz == "Local" {
				return usagef("unknown time zone %q for --tz; use an IANA name such as Europe/Paris or UTC", tz)
			}
			start := now()
			if cmd.Flags().Changed("from") {
				start, err = time.Parse(time.RFC3339Nano, from)
				if err != nil {
					return usagef("--from %q is not an RFC 3339 time such as 2026-12-01T00:00:00Z or 2026-12-01T08:00:00.5+08:00", from)
				}
			}
			if count < 0 || count > maxExplainCount {
				return usagef("-n must be between 0 and %d, not %d", maxExplainCount, count)
			}
			out := explainOutput{Expression: expr, TimeZone: tz, Next: []string{}}
			at := start
			for range count {
				next, ok := ce.Next(at, loc)
				if !ok {
					break
				}
				out.Next = append(out.Next, trigger.FormatTime(next.In(loc)))
				at = next
			}
			w := cmd.OutOrStdout()
			switch output {
			case "json":
				enc := json.NewEncoder(w)
				return enc.Encode(out)
			case "text", "":
				for _, s := range out.Next {
					if _, err := fmt.Fprintln(w, s); err != nil {
						return err
					}
				}
				return nil
			default:
				return usagef("unknown output format %q for -o; use text or json", output)
			}
		},
	}
	f := cmd.Flags()
	f.StringVar(&tz, "tz", "UTC", "IANA time zone the expression is evaluated in")
	f.StringVar(&from, "from", "", "RFC 3339 instant to start after, with or without fractional seconds (default: now)")
	f.IntVarP(&count, "count", "n", 10, "number of fire times to print")
	f.StringVarP(&output, "output", "o", "text", "output format: text (one time per line) or json")
	return cmd
}
