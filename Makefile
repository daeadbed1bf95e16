# Agate's developer commands. `make help` lists them.
.DEFAULT_GOAL := help
GO ?= go

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z/_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: dev
dev: ## run an all-in-one Agate: embedded NATS, local PostgreSQL, a node, a worker, an example schedule
	@./scripts/ensure-postgres.sh
	$(GO) build -o bin/scheduler ./cmd/scheduler
	@# exec, not `go run`: go run exits 1 whenever it gets SIGINT, whatever the program's status.
	exec bin/scheduler dev

.PHONY: build
build: ## build the binaries into bin/
	$(GO) build -o bin/ ./cmd/...

.PHONY: test
test: ## vet and run every test against real PostgreSQL and NATS JetStream (and the UI in headless Chromium); screenshots in test-artifacts/
	@./scripts/ensure-postgres.sh
	@./scripts/ensure-chromium.sh
	$(GO) vet ./...
	@mkdir -p test-artifacts
	$(GO) test -count=1 -timeout 25m -artifacts -outputdir $(CURDIR)/test-artifacts ./...

.PHONY: test/race
test/race: ## the tests with the race detector
	@./scripts/ensure-postgres.sh
	@./scripts/ensure-chromium.sh
	$(GO) test -race -count=1 -timeout 25m ./...

.PHONY: lint
lint: ## gofmt, go vet and staticcheck
	@test -z "$$(gofmt -l .)" || (gofmt -l . && echo "gofmt would change the files above" && exit 1)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

.PHONY: bench
bench: ## black-box: burst of 20k on 2 and 4 schedulers, steady 5000/s on 2, failover (a scheduler killed), then the burst on River and Quartz side by side; PROFILE=dir for CPU profiles
	@./scripts/ensure-postgres.sh
	$(GO) run ./cmd/agatebench --compare $(if $(PROFILE),--profile $(PROFILE))

.PHONY: bench-intake
bench-intake: ## command intake: schedule_job commands/s on cmd (JetStream) and api, 1/2/4 scheduler processes, beside River's InsertMany
	@./scripts/ensure-postgres.sh
	$(GO) run ./cmd/agatebench --workloads intake $(if $(PROFILE),--profile $(PROFILE) --profile-seconds 3)

.PHONY: chaos
chaos: ## the 20-minute chaos run (about 240 faults): kills, stops and restarts under load, then checks no fire was lost or doubled (SEED=n replays)
	@./scripts/ensure-postgres.sh
	$(GO) build -o bin/agatechaos ./cmd/agatechaos
	exec bin/agatechaos --duration 20m --faults-every 5s $(if $(SEED),--seed $(SEED)) --out chaos-report.txt

.PHONY: fuzz
fuzz: ## fuzz the cron parser and next-fire functions for 30s each
	$(GO) test ./internal/trigger -run '^$$' -fuzz FuzzParseCron -fuzztime 30s

.PHONY: tidy
tidy: ## go mod tidy
	$(GO) mod tidy
