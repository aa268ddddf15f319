package template

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSlowTemplatesAreRefusedInTime: work the steps do not see (comparing
// or sorting long values in loops in loops) is refused once the renderer
// is out of time, not left running for minutes. The limit is cut to
// 100 ms so that the test does not depend on this machine's speed: each
// case takes seconds without it.
func TestSlowTemplatesAreRefusedInTime(t *testing.T) {
	long := strings.Repeat("a", 300<<10)
	vars := Vars{"x": long, "y": long[1:] + "b"}
	for i := range 40 {
		vars[fmt.Sprintf("v%d", i)] = "1"
	}
	nest := func(d int) string { return strings.Repeat(`{{ range $.Vars }}`, d) + strings.Repeat(`{{ end }}`, d) }
	cases := map[string]struct {
		tmpl string
		vars Vars
	}{
		"comparing long vars in nested loops": {`{{ $x := .Vars.x }}{{ $y := .Vars.y }}{{ range .Vars }}{{ range $.Vars }}{{ if eq $x` + strings.Repeat(" $y", 200) + ` }}{{ end }}{{ end }}{{ end }}echo`, vars},
		"sorting long keys in nested loops":   {nest(20) + "echo", Vars{long + "1": "1", long + "2": "2"}},
	}
	for name, c := range cases {
		r := New(nil)
		r.limit = 100 * time.Millisecond
		start := time.Now()
		_, err := r.Render(c.tmpl, Data{Host: "h", Vars: c.vars})
		if took := time.Since(start); !errors.Is(err, ErrTooSlow) || took > 5*time.Second {
			t.Errorf("%s: %v after %s, want ErrTooSlow soon after 100ms", name, err, took.Round(time.Millisecond))
		}
	}
}

// TestRenderTimeCountsFromTheFirstRender: a renderer made and left idle
// has all its time for its first template.
func TestRenderTimeCountsFromTheFirstRender(t *testing.T) {
	r := New(nil)
	r.limit = 50 * time.Millisecond
	time.Sleep(100 * time.Millisecond)
	if out, err := r.Render(`{{ .Host }}`, Data{Host: "h"}); err != nil || out != "h" {
		t.Errorf("%q %v, want h", out, err)
	}
}
