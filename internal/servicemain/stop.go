package servicemain

import "context"

// StopAsked is err, the error a service's run returned, or nil when err
// only says that ctx, the run's context, was cancelled: a stop asked for
// while the service was starting (creating its streams, buckets and
// consumers with ctx) is a stop, not a failure. An error that does not
// come from ctx's end is returned as it is, whenever it came, even
// joined with a cancellation.
func StopAsked(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && onlyCancelled(err) {
		return nil
	}
	return err
}

// onlyCancelled says whether err is context.Canceled, or wraps it and
// nothing else (every error an errors.Join holds wraps it).
func onlyCancelled(err error) bool {
	if err == context.Canceled { // the leaf itself: what it wraps is read below
		return true
	}
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		for _, one := range e.Unwrap() {
			if !onlyCancelled(one) {
				return false
			}
		}
		return len(e.Unwrap()) > 0
	case interface{ Unwrap() error }:
		return e.Unwrap() != nil && onlyCancelled(e.Unwrap())
	}
	return false
}
