package client

import (
	"encoding/json"
	"fmt"
)

func decodeBody(data []byte, out any) error { return json.Unmarshal(data, out) }

func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode the request: %w", err)
	}
	return b, nil
}
