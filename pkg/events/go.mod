module github.com/gantry-dev/gantry/pkg/events

go 1.26.8

require (
	github.com/cloudevents/sdk-go/v2 v2.16.2
	github.com/gantry-dev/gantry/pkg/dag v0.0.0
	github.com/google/uuid v1.6.0
	github.com/nats-io/nats.go v1.55.0
)

require (
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/minio/highwayhash v1.0.4 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	github.com/nats-io/jwt/v2 v2.8.3 // indirect
	github.com/nats-io/nats-server/v2 v2.15.2 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0 // indirect
)

require (
	github.com/cenkalti/backoff/v4 v4.3.0
	github.com/gantry-dev/gantry/pkg/busauth v0.0.0
	github.com/gantry-dev/gantry/pkg/natsconn v0.0.0
	github.com/gantry-dev/gantry/pkg/natsembed v0.0.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
)

replace (
	github.com/gantry-dev/gantry/pkg/busauth => ../busauth
	github.com/gantry-dev/gantry/pkg/dag => ../dag
	github.com/gantry-dev/gantry/pkg/natsconn => ../natsconn
	github.com/gantry-dev/gantry/pkg/natsembed => ../natsembed
)
