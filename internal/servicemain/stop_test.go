package servicemain

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestStopAsked(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	running := context.Background()
	broken := errors.New("kv bucket gantry_slots: permission denied")
	for _, c := range []struct {
		name    string
		ctx     context.Context
		err     error
		stopped bool // StopAsked says nil
	}{
		{"no error", cancelled, nil, true},
		{"the stop, wrapped while starting", cancelled, fmt.Errorf("executor: kv bucket gantry_slots: %w", context.Canceled), true},
		{"the stop, joined twice", cancelled, errors.Join(fmt.Errorf("a: %w", context.Canceled), context.Canceled), true},
		{"a cancellation nobody asked for", running, fmt.Errorf("executor: %w", context.Canceled), false},
		{"a failure while stopping", cancelled, fmt.Errorf("executor: %w", broken), false},
		{"a failure joined with the stop", cancelled, errors.Join(context.Canceled, broken), false},
		{"a deadline is not a stop", cancelled, fmt.Errorf("executor: %w", context.DeadlineExceeded), false},
		{"an empty join", cancelled, errors.Join(), true}, // errors.Join() is nil
	} {
		t.Run(c.name, func(t *testing.T) {
			got := StopAsked(c.ctx, c.err)
			if c.stopped && got != nil {
				t.Errorf("StopAsked = %v, want nil", got)
			}
			if !c.stopped && !errors.Is(got, c.err) {
				t.Errorf("StopAsked = %v, want %v", got, c.err)
			}
		})
	}
}
