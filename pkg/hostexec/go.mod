module github.com/gantry-dev/gantry/pkg/hostexec

go 1.26.8

require golang.org/x/crypto v0.58.0

require github.com/prometheus/client_golang v1.25.0 // indirect

require (
	github.com/gantry-dev/gantry/pkg/dag v0.0.0
	golang.org/x/sys v0.49.0 // indirect
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
