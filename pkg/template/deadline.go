package template

import (
	"fmt"
	"time"
)

// MaxRenderTime bounds the wall time of rendering all of one
// composition's templates. The steps count what a template does, not
// what each call costs: comparing or printing long values in a loop can
// take minutes within the steps. Every function call, loop and write
// checks the time, so a composition over it is refused in about this
// time, whatever its templates do.
const MaxRenderTime = 10 * time.Second

// ErrTooSlow: rendering a composition's templates took more than
// MaxRenderTime.
var ErrTooSlow = fmt.Errorf("template: rendering this composition's templates takes more than %s (comparisons or prints of long values in loops): make them simpler", MaxRenderTime)

// inTime fails once the renderer has rendered for longer than its
// limit, counted from its first Render.
func (r *Renderer) inTime() error {
	if r.deadline.IsZero() {
		r.deadline = time.Now().Add(r.limit)
	}
	if time.Now().After(r.deadline) {
		return ErrTooSlow
	}
	return nil
}
