module github.com/gantry-dev/gantry/pkg/busauth

go 1.26.8

require (
	github.com/gantry-dev/gantry/pkg/events v0.0.0
	github.com/nats-io/jwt/v2 v2.8.3
	github.com/nats-io/nkeys v0.4.17
)

require (
	github.com/gantry-dev/gantry/pkg/dag v0.0.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/nats-io/nats.go v1.55.0 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace (
	github.com/gantry-dev/gantry/pkg/dag => ../dag
	github.com/gantry-dev/gantry/pkg/events => ../events
)
