package composition_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
)

// TestInventoryTypedVarsInTemplates: an inventory's list and mapping vars
// (INI and YAML) reach a composition's templates typed: a command ranges
// over the list and reads the mapping's field, with no fromjson.
func TestInventoryTypedVarsInTemplates(t *testing.T) {
	inventories := map[string]string{
		"hosts.ini": "[web]\nweb-1 ansible_connection=local\n\n[web:vars]\n" +
			"ntp_servers=['0.pool.ntp.org', '1.pool.ntp.org']\ncfg={'port': 8080, 'tls': True}\nworkers=4\n",
		"hosts.yaml": "web:\n  hosts:\n    web-1: {ansible_connection: local}\n  vars:\n" +
			"    ntp_servers: [0.pool.ntp.org, 1.pool.ntp.org]\n    cfg: {port: 8080, tls: true}\n    workers: 4\n",
	}
	const comp = "name: t\ninventory: %s\nformulas:\n  - id: f\n    group: web\n    nodes:\n" +
		"      - name: n\n        run: \"{{ range .Vars.ntp_servers }}{{ . }} {{ end }}port={{ .Vars.cfg.port }} workers={{ .Vars.workers }}\"\n" +
		"    health_gate: {check: \"test {{ .Vars.cfg.port }} -gt {{ len .Vars.ntp_servers }}\", timeout: 10s, retries: 1}\n"
	for name, inv := range inventories {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, filepath.Join(dir, name), inv)
			write(t, filepath.Join(dir, "c.yaml"), fmt.Sprintf(comp, name))
			c, err := composition.LoadFile(filepath.Join(dir, "c.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			f := c.Formulas[0]
			if got, want := f.Nodes[0].Run, "0.pool.ntp.org 1.pool.ntp.org port=8080 workers=4"; got != want {
				t.Errorf("run rendered %q, want %q", got, want)
			}
			if got, want := f.HealthGate.Check, "test 8080 -gt 2"; got != want {
				t.Errorf("health gate rendered %q, want %q", got, want)
			}
			h := c.Hosts["web-1"]
			if h.Vars["ntp_servers"] != `["0.pool.ntp.org","1.pool.ntp.org"]` || h.Vars["cfg"] != `{"port":8080,"tls":true}` {
				t.Errorf("vars travel as %q", h.Vars)
			}
		})
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
