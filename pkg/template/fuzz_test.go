package template_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/template"
)

// FuzzRender: any template text renders or is an error, without a panic,
// and never to more than MaxRendered bytes.
func FuzzRender(f *testing.F) {
	for _, s := range []string{
		"echo {{ .Host }}", `{{ range $k, $v := .Vars }}{{ $k }}={{ shq $v }} {{ end }}`, `{{ range 5 }}{{ end }}`,
		`{{ define "x" }}{{ end }}`, `{{ printf "%999999d" 1 }}`, `{{ index .Vars "a" }}{{ if eq .Host "h" }}y{{ end }}`,
		`{{ range fromjson .Vars.l }}{{ . }}{{ end }}`, `{{ output "a/b" "c" }}`, `{{ .Vars.nope }}`, `{{ html .Labels }}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := template.New(nil)
		d := template.Data{Host: "h", Address: "10.0.0.1:22", Labels: template.Map{"zone": "a"}, Vars: template.Vars{"a": "x", "l": `["1","2"]`}}
		out, err := r.Render(s, d)
		if err == nil && len(out) > template.MaxRendered {
			t.Fatalf("rendered %d bytes", len(out))
		}
	})
}
