module github.com/gantry-dev/gantry/services/executor

go 1.26.8

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/gantry-dev/gantry/pkg/consume v0.0.0
	github.com/gantry-dev/gantry/pkg/dag v0.0.0
	github.com/gantry-dev/gantry/pkg/events v0.0.0
	github.com/gantry-dev/gantry/pkg/hostexec v0.0.0
	github.com/gantry-dev/gantry/pkg/busauth v0.0.0
	github.com/gantry-dev/gantry/pkg/natsconn v0.0.0
	github.com/gantry-dev/gantry/pkg/natsembed v0.0.0
	github.com/gantry-dev/gantry/pkg/secrets v0.0.0
	github.com/nats-io/nats.go v1.55.0
)

require (
	github.com/gantry-dev/gantry/pkg/buildinfo v0.0.0
	github.com/gantry-dev/gantry/pkg/metricsserve v0.0.0
	github.com/gantry-dev/gantry/pkg/tracing v0.0.0
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/gantry-dev/gantry/pkg/dag => ../../pkg/dag

replace github.com/gantry-dev/gantry/pkg/events => ../../pkg/events

replace github.com/gantry-dev/gantry/pkg/consume => ../../pkg/consume

replace github.com/gantry-dev/gantry/pkg/hostexec => ../../pkg/hostexec

replace github.com/gantry-dev/gantry/pkg/secrets => ../../pkg/secrets

replace github.com/gantry-dev/gantry/pkg/natsconn => ../../pkg/natsconn

replace github.com/gantry-dev/gantry/pkg/composition => ../../pkg/composition

replace github.com/gantry-dev/gantry/pkg/natsembed => ../../pkg/natsembed

replace github.com/gantry-dev/gantry/pkg/busauth => ../../pkg/busauth

replace github.com/gantry-dev/gantry/services/planner => ../../services/planner

replace github.com/gantry-dev/gantry/services/health-gate => ../../services/health-gate

replace github.com/gantry-dev/gantry/services/state-store => ../../services/state-store

replace github.com/gantry-dev/gantry/cmd/gantry => ../../cmd/gantry

replace github.com/gantry-dev/gantry/pkg/buildinfo => ../../pkg/buildinfo

replace github.com/gantry-dev/gantry/pkg/metricsserve => ../../pkg/metricsserve
replace github.com/gantry-dev/gantry/pkg/tracing => ../../pkg/tracing
