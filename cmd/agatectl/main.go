// Command agatectl is the operator's command line for Agate: it schedules, steers and inspects
// a cluster through the public client package (schedule, pause, resume, trigger, delete,
// interrupt, get, list, next, history, instances, calendars), tails the event log (events
// -f), and explains cron expressions without a cluster.
//
//	agatectl schedule -f jobs.yaml
//	agatectl events -f --job reports.daily-stats
//	agatectl cron explain "0 0/15 9-17 ? * MON-FRI" --tz Europe/Paris -n 5
//
// Exit status: 0 on success; 1 rejected by the cluster; 2 invalid input; 3 unavailable.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
