package events

import (
	"time"
)

// StorageStatus is a service's view of JetStream storage, in its status:
// OK, or the streams and buckets its writes fail on.
type StorageStatus struct {
	OK       bool             `json:"ok"`
	Problems []StorageProblem `json:"problems,omitempty"`
}

// StorageProblem is a stream or bucket this service cannot store on.
type StorageProblem struct {
	Stream string    `json:"stream"`
	Cause  string    `json:"cause"`
	Since  time.Time `json:"since"`
	// Failures counts the writes that failed since; LastError is the
	// last one's error.
	Failures  int    `json:"failures"`
	LastError string `json:"last_error"`
}
