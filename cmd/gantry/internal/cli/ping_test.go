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
