module github.com/gantry-dev/gantry/pkg/events

go 1.26.8

require (
	github.com/cloudevents/sdk-go/v2 v2.16.2
	github.com/gantry-dev/gantry/pkg/dag v0.0.0
	github.com/google/uuid v1.6.0
	github.com/nats-io/nats.go v1.55.0
)

require (
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/gantry-dev/gantry/pkg/dag => ../dag
