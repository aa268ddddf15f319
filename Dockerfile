# gantry's images built from source, for `docker compose up --build` where
# a registry is reachable (golang and debian images are pulled). Without a
# registry, `make up` builds the same images from binaries built on the
# host (docker/*.Dockerfile) and needs no pull.
#
#   docker build --target planner -t gantry/planner:dev .   # and executor,
#   health-gate, state-store, nats (nats-server and the CLI), keys
#   (`make dev-keys` in a container: writes dev/keys and dev/secrets)
ARG GO_IMAGE=golang:1.26-bookworm
ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${GO_IMAGE} AS build
# the gantry module alone: go.work also names tools/, which this build
# does not need
ENV GOWORK=off CGO_ENABLED=0
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=0.1.0-dev
RUN set -eu; mkdir -p /out; \
	flags="-s -w -X github.com/gantry-dev/gantry/pkg/buildinfo.version=${VERSION}"; \
	for s in planner executor health-gate state-store; do \
		go build -trimpath -ldflags "$flags" -o /out/$s ./services/$s; \
	done; \
	go build -trimpath -ldflags "$flags" -o /out/gantry ./cmd/gantry; \
	go build -trimpath -ldflags "-s -w" -o /out/nats-server github.com/nats-io/nats-server/v2

# As docker/nats.Dockerfile: nats-server, and the CLI for the health check.
FROM scratch AS nats
COPY --from=build /out/nats-server /nats-server
COPY --from=build /out/gantry /gantry
USER 0
EXPOSE 4222 8222
ENTRYPOINT ["/nats-server"]
CMD ["--jetstream", "--store_dir", "/data", "--http_port", "8222"]

# As docker/service.Dockerfile: one static binary in an empty image.
FROM scratch AS planner
COPY --from=build /out/planner /service
USER 0
ENTRYPOINT ["/service"]

FROM scratch AS executor
COPY --from=build /out/executor /service
USER 0
ENTRYPOINT ["/service"]

FROM scratch AS health-gate
COPY --from=build /out/health-gate /service
USER 0
ENTRYPOINT ["/service"]

FROM scratch AS state-store
COPY --from=build /out/state-store /service
USER 0
ENTRYPOINT ["/service"]

# As docker/keys.Dockerfile: docker/dev-keys.sh with ssh-keygen and the CLI.
FROM ${DEBIAN_IMAGE} AS keys
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssh-client && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/gantry /usr/local/bin/gantry
COPY docker/dev-keys.sh /usr/local/bin/dev-keys
ENV GANTRY=/usr/local/bin/gantry
ENTRYPOINT ["/usr/local/bin/dev-keys"]
