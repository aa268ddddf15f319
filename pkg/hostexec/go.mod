module github.com/gantry-dev/gantry/pkg/hostexec

go 1.26.8

require golang.org/x/crypto v0.58.0

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

require (
	github.com/gantry-dev/gantry/pkg/dag v0.0.0
	golang.org/x/sys v0.49.0
)

replace github.com/gantry-dev/gantry/pkg/dag => ../../pkg/dag

replace github.com/gantry-dev/gantry/pkg/events => ../../pkg/events

replace github.com/gantry-dev/gantry/pkg/composition => ../../pkg/composition

replace github.com/gantry-dev/gantry/pkg/consume => ../../pkg/consume

replace github.com/gantry-dev/gantry/pkg/natsembed => ../../pkg/natsembed

replace github.com/gantry-dev/gantry/pkg/natsconn => ../../pkg/natsconn

replace github.com/gantry-dev/gantry/services/planner => ../../services/planner

replace github.com/gantry-dev/gantry/services/executor => ../../services/executor

replace github.com/gantry-dev/gantry/services/health-gate => ../../services/health-gate

replace github.com/gantry-dev/gantry/services/state-store => ../../services/state-store

replace github.com/gantry-dev/gantry/cmd/gantry => ../../cmd/gantry
