// Package schemas holds Agate's public contract in machine-readable form: the SQL migrations that
// create the tables (sql/) and the JSON Schemas of every command, query and event (json/). It is a Go
// package only because go:embed reaches files under its own directory.
package schemas

import "embed"

// SQL holds the numbered migrations, applied in order by internal/store.Migrate.
//
//go:embed sql/*.sql
var SQL embed.FS

// JSON holds the JSON Schemas: json/command/<command>.json, json/event/<Event>.json, and
// json/query/<query>.json with its reply, json/query/<query>.reply.json.
//
//go:embed json
var JSON embed.FS
