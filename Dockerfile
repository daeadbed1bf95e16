# syntax=docker/dockerfile:1
#
# One image for every Agate process: scheduler, worker and agatectl are all on PATH and the image
# fixes no ENTRYPOINT, so compose.yaml (or Kubernetes) picks the binary with `command:`, e.g.
#   docker run --rm agate scheduler run
#   docker run --rm agate worker --concurrency 20
# Configuration is by flags and environment variables only (docs/architecture.md).

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# Static binaries (no cgo), no local paths in them. -o into a directory builds every main package.
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/scheduler ./cmd/worker ./cmd/agatectl

# distroless/static: no shell, no package manager; it carries CA certificates (NATS/PostgreSQL TLS,
# the http job type) and /usr/share/zoneinfo (cron triggers name IANA time zones). SQL migrations
# and JSON Schemas are embedded in the binaries, so nothing else is copied.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/scheduler /out/worker /out/agatectl /usr/local/bin/
ENV PATH=/usr/local/bin:/usr/bin:/bin
# 65532 is distroless's "nonroot"; numeric so that runAsNonRoot checks can verify it.
USER 65532:65532
CMD ["scheduler", "run"]
