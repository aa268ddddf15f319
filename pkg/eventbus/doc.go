// Package eventbus carries pkg/events' contract over NATS JetStream: it
// creates the streams, consumers and buckets the topology names (and heals
// them when they go missing), publishes events (Publisher, and the Outbox
// that stores a unit of work's events in order), keeps records in KV
// buckets (Bucket), frames large bodies with gzip, propagates trace
// context in message headers, sets up each service's NATS micro service,
// and follows whether JetStream stores a service's writes (Storage).
// pkg/eventbus/eventbustest has its in-memory stand-ins for tests.
package eventbus
