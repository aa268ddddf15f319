package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrBadControl: a control request's body is not one.
var ErrBadControl = errors.New("bad control request")

// ControlRequest is the body of a control request on
// workflow.<id>.<verb>. An empty body is the zero request.
type ControlRequest struct {
	// Nodes limits a retry to these failed nodes, each "formula/node",
	// and what depends on them; every other failure stays as it is.
	Nodes []string `json:"nodes,omitempty"`
}

// ParseControlRequest reads a control request's body for verb.
func ParseControlRequest(verb string, body []byte) (ControlRequest, error) {
	var req ControlRequest
	if len(strings.TrimSpace(string(body))) == 0 {
		return req, nil
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, fmt.Errorf("%w: the body is not JSON like {\"nodes\":[\"formula/node\"]}: %w", ErrBadControl, err)
	}
	if len(req.Nodes) > 0 && verb != VerbRetry {
		return req, fmt.Errorf("%w: nodes apply to retry only, not %s", ErrBadControl, verb)
	}
	return req, nil
}
