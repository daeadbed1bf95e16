// Package cli is what every Agate binary (scheduler, worker, agatectl, agatebench) does the same
// way on its command line: flags bound to environment variables, --version from the build
// information, the logger that --log-level selects, and the HTTP listener of --http and --pprof
// with the healthcheck command that asks it.
//
// A flag bound with [BindEnv] takes its variable's value when the flag is not given on the
// command line; the flag wins. Defaults shown by --help are the flags' own defaults, never values
// read from the environment or computed at start (such as a random instance id): the variables
// are applied by [Setup]'s pre-run hook, after parsing and before the command runs.
package cli
