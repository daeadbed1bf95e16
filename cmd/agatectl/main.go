// Command agatectl is the operator's command line for Agate. For now it explains cron
// expressions: which times a Quartz cron expression selects in a time zone.
//
//	agatectl cron explain "0 0/15 9-17 ? * MON-FRI" --tz Europe/Paris -n 5
//	agatectl cron explain "0 0 2 L * ?" --from 2026-12-01T00:00:00Z -o json
//
// Exit status: 0 on success, 2 for invalid input (expression, zone, time, flags), 1 otherwise.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
