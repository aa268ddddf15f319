package eventbus

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A creation the server refuses with an internal error is tried again; a
// refusal of the request itself is not.
func TestRetryServerError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		errs  []error
		tries int
		ok    bool
	}{
		{"a race lost twice, then created", []error{&jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "error creating store for stream"}, &jetstream.APIError{Code: 500}, nil}, 3, true},
		{"a bad request is not tried again", []error{&jetstream.APIError{Code: 400, Description: "stream name already in use"}}, 1, false},
		{"other errors are not tried again", []error{errors.New("timeout")}, 1, false},
		{"gives up after 6", []error{&jetstream.APIError{Code: 500}, &jetstream.APIError{Code: 500}, &jetstream.APIError{Code: 500}, &jetstream.APIError{Code: 500}, &jetstream.APIError{Code: 500}, &jetstream.APIError{Code: 500}, nil}, 6, false},
	} {
		tries := 0
		err := retryServerError(context.Background(), func() error { tries++; return c.errs[tries-1] })
		if tries != c.tries || (err == nil) != c.ok {
			t.Errorf("%s: %d tries, err %v", c.name, tries, err)
		}
	}
}
