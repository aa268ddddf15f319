// Package eventstest helps tests build the events other services would
// publish.
package eventstest

import (
	"encoding/json"

	"github.com/gantry-dev/gantry/pkg/events"
)

// Marshal encodes a payload as the complete CloudEvent a service with
// source would publish, and returns its envelope too.
func Marshal(source string, p events.Payload) ([]byte, *events.Envelope, error) {
	env, err := events.New(source, p)
	if err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(env)
	return b, env, err
}
