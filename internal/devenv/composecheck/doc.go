// Package composecheck holds no code that Agate runs: it exists only so that `go test ./...`
// checks the deployment files at the root of the repository, which no container engine on a CI
// machine would otherwise exercise:
//
//   - compose.yaml is loaded with the Compose specification's own loader and validator
//     (compose-go), and its services are checked against what the binaries need: the database,
//     NATS and OTLP settings of each scheduler node and worker, health-gated dependencies;
//   - deploy/nats/nats.conf is parsed by nats-server itself, and an embedded server running it
//     checks that each user's permissions let its role do its job and nothing more;
//   - the Dockerfile is read as text: every ./cmd/<name> it builds must be a main package;
//   - deploy/prometheus and deploy/grafana (observe_test.go): every scheduler and worker service
//     is a scrape target, the files parse, alerts have summaries (and pass `promtool check
//     rules` where promtool is installed), and every agate_* metric the alerts and dashboards
//     query is one the code creates (read from the instruments' definitions in the source).
//
// The tests read files relative to this directory (../../../compose.yaml and so on) and run in well
// under a second, without network or containers.
package composecheck
