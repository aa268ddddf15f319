package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestPingHidesThePassword: a ping that finds no JetStream names the
// server it reached, without the URL's password.
func TestPingHidesThePassword(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, Username: "alice", Password: "S3cretPW", NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	defer s.Shutdown()
	url := strings.Replace(s.ClientURL(), "nats://", "nats://alice:S3cretPW@", 1)
	code, out, errOut := run(t, "ping", "--server", url, "--timeout", "3s")
	if code == 0 {
		t.Fatalf("ping without JetStream passed: %s", out)
	}
	if strings.Contains(out+errOut, "S3cretPW") {
		t.Errorf("the password is shown: %s%s", out, errOut)
	}
	if !strings.Contains(errOut, "alice:") || !strings.Contains(errOut, "JetStream") {
		t.Errorf("the error does not name the server and what is missing: %s", errOut)
	}
}

// storageReport names, from a service instance's micro stats, each stream
// or bucket it cannot store on; an instance that stores, or one too old
// to say, names none.
func TestStorageReport(t *testing.T) {
	for name, c := range map[string]struct {
		stats string
		want  []string
	}{
		"troubled": {`{"name":"gantry-executor","endpoints":[{"name":"status","data":{"instance":"executor/vm-1","storage":{"ok":false,"problems":[
			{"stream":"gantry_slots","cause":"no space left on device","since":"2026-11-21T12:00:00Z","failures":4,"last_error":"x"}]}}}]}`,
			[]string{"gantry-executor (executor/vm-1): JetStream cannot store on gantry_slots since 2026-11-21T12:00:00Z (4 writes failed): no space left on device"}},
		"ok":        {`{"name":"gantry-planner","endpoints":[{"name":"status","data":{"instance":"planner/vm-1","storage":{"ok":true}}},{"name":"submit","data":null}]}`, nil},
		"older":     {`{"name":"gantry-planner","endpoints":[{"name":"status","data":{"instance":"planner/vm-1","workflows_active":2}}]}`, nil},
		"not stats": {`nonsense`, nil},
	} {
		got := storageReport([]byte(c.stats))
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}
