package render

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
)

var update = flag.Bool("update", false, "rewrite the golden files from what the renderers print")

// multiLine has scripts of several lines (a block scalar, a heredoc), one
// line with shell operators, and a gate of two lines.
const multiLine = `name: scripts
hosts: {db-1: {address: 10.0.0.5}}
formulas:
  - id: db
    server: db-1
    nodes:
      - name: install
        run: |
          apt-get update
          apt-get install -y postgresql && systemctl enable postgresql

          cat > /etc/app.conf <<EOF
          listen = 0.0.0.0
          EOF
      - name: check
        run: test -s /etc/app.conf && pg_isready -h localhost > /dev/null
    health_gate:
      check: |
        pg_isready -h localhost
        psql -c 'select 1'
      timeout: 30s
      retries: 3
`

// The plan's text shows a script of several lines as an indented block,
// each line as written; its JSON keeps &&, < and > as they are (no
// \u0026). The golden files are what gantry plan prints (go test
// -update rewrites them).
func TestPlanGolden(t *testing.T) {
	c, err := composition.Load("scripts.yaml", []byte(multiLine))
	if err != nil {
		t.Fatal(err)
	}
	p := dag.PlanLoaded(c)
	for format, golden := range map[string]string{"text": "multiline.txt", "json": "multiline.json"} {
		var b bytes.Buffer
		if err := Renderers[format](&b, p); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", golden)
		if *update {
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Errorf("%s: printed\n%s\nwant (%s)\n%s", format, b.String(), path, want)
		}
		if bytes.Contains(b.Bytes(), []byte(`\u0026`)) || bytes.Contains(b.Bytes(), []byte(`\u003c`)) || bytes.Contains(b.Bytes(), []byte(`\u003e`)) {
			t.Errorf("%s: & < > escaped for HTML:\n%s", format, b.String())
		}
	}
}
