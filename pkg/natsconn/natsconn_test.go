package natsconn_test

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/nats-io/nats-server/v2/server"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                          "nats://127.0.0.1:4222",
		"nats://alice:hunter2@nats:4222":                 "nats://alice:***@nats:4222",
		"nats://s3cr3t-token@nats:4222":                  "nats://***@nats:4222",
		"nats://a:p1@n1:4222,nats://b:p2@n2:4222":        "nats://a:***@n1:4222,nats://b:***@n2:4222",
		"tls://bob:pa%40ss@nats.example.com:4443":        "tls://bob:***@nats.example.com:4443",
		"not a url :// with:password@host and % escapes": "***@host and % escapes",
		"nats://alice:S3c,retPW@127.0.0.1:4222":          "***,***@127.0.0.1:4222",
	} {
		got := natsconn.Redact(in)
		if got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "hunter2") || strings.Contains(got, "p1@") || strings.Contains(got, "s3cr3t") {
			t.Errorf("Redact(%q) leaks: %q", in, got)
		}
	}
}

// syncBuffer is a log sink safe for the connection's callbacks.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// passwordServer is a real nats-server that takes a user and password
// (as a deployment of one's own might), restartable on the same port.
func passwordServer(t *testing.T, port int, password string) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoSigs: true,
		Users: []*server.User{{Username: "gantry", Password: password}}})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return s
}

// A password in the URL never reaches a log line: not on connect, not on
// disconnect, not on reconnect after the server restarts, and not in a
// failed connect's error.
func TestPasswordNeverLogged(t *testing.T) {
	const secret = "hunter2-do-not-log"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := passwordServer(t, port, secret)
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	url := "nats://gantry:" + secret + "@127.0.0.1:" + strconv.Itoa(port)
	nc, err := natsconn.Connect(natsconn.Options{URL: url}, "test", log, true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatalf("not connected: %v", err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	s = passwordServer(t, port, secret)
	defer s.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "nats reconnected") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "nats reconnected") || !strings.Contains(logs.String(), "nats disconnected") {
		t.Fatalf("no disconnect and reconnect logged:\n%s", logs.String())
	}
	// A connect that fails names the server, without the password.
	_, err = natsconn.Connect(natsconn.Options{URL: "nats://gantry:" + secret + "@127.0.0.1:1"}, "test", log, false)
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("failed connect: %v", err)
	}
	// So does a wrong password.
	_, err = natsconn.Connect(natsconn.Options{URL: "nats://gantry:wrong-" + secret + "@127.0.0.1:" + strconv.Itoa(port)}, "test", log, false)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("wrong password: %v", err)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("the password is in the log:\n%s", logs.String())
	}
	t.Logf("log:\n%s", logs.String())
}

// Flags beat the environment, which beats the context; the selected
// context is used when none is named.
func TestResolvedPrecedence(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	for _, k := range []string{"NATS_URL", "NATS_CREDS", "NATS_NKEY", "NATS_USER", "NATS_PASSWORD", "NATS_CA", "NATS_CERT", "NATS_KEY", "NATS_CONTEXT"} {
		t.Setenv(k, "")
	}
	os.MkdirAll(filepath.Join(cfg, "nats", "context"), 0o755)
	os.WriteFile(filepath.Join(cfg, "nats", "context", "prod.json"), []byte(`{"url":"nats://ctx:4222","nkey":"/ctx/op.nk","ca":"/ctx/ca.pem"}`), 0o600)
	os.WriteFile(filepath.Join(cfg, "nats", "context.txt"), []byte("prod\n"), 0o600)

	o, err := natsconn.Options{}.Resolved(os.Getenv)
	if err != nil || o.URL != "nats://ctx:4222" || o.NKey != "/ctx/op.nk" || o.CA != "/ctx/ca.pem" {
		t.Errorf("selected context: %+v %v", o, err)
	}
	t.Setenv("NATS_URL", "nats://env:4222")
	t.Setenv("NATS_CA", "/env/ca.pem")
	o, _ = natsconn.Options{NKey: "/flag/op.nk"}.Resolved(os.Getenv)
	if o.URL != "nats://env:4222" || o.NKey != "/flag/op.nk" || o.CA != "/env/ca.pem" {
		t.Errorf("flag > env > context: %+v", o)
	}
	if _, err := (natsconn.Options{Context: "missing"}).Resolved(os.Getenv); err == nil || !strings.Contains(err.Error(), `context "missing"`) {
		t.Errorf("a named context that is not there: %v", err)
	}
	if _, err := natsconn.Connect(natsconn.Options{Creds: "/x.creds", NKey: "/y.nk"}, "t", nil, false); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("creds and nkey together: %v", err)
	}
	if _, err := natsconn.Connect(natsconn.Options{Cert: "/c.pem"}, "t", nil, false); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Errorf("cert without key: %v", err)
	}
}

// TestConnectErrorHidesThePassword: nats.go quotes the whole URL when it
// cannot parse it (a typo in the port is enough), so the error of a
// connection must be scrubbed, not only the URL gantry puts in front.
func TestConnectErrorHidesThePassword(t *testing.T) {
	for _, tc := range []struct{ url, secret string }{
		{"nats://u:hunter2pw@127.0.0.1:notaport", "hunter2pw"},
		{"nats://u:hunter2 pw@127.0.0.1:29998", "hunter2 pw"},
		{"nats://tok3nsecret@127.0.0.1:bad", "tok3nsecret"},
		{`nats://u:pa"ss\word@127.0.0.1:x`, `pa"ss\word`},
		{"nats://u:pa%40ss@127.0.0.1:x", "pa@ss"},
		{"nats://a:first-pw@127.0.0.1:1,nats://b:second-pw@127.0.0.1:bad", "second-pw"},
		{"nats://alice:S3c,retPW@127.0.0.1:34817", "S3c"},
		{"nats://alice:S3c,retPW@127.0.0.1:34817", "retPW"},
	} {
		_, err := natsconn.Connect(natsconn.Options{URL: tc.url}, "test", nil, false)
		if err == nil {
			t.Fatalf("%s: connected", tc.url)
		}
		msg := err.Error()
		quoted := strconv.Quote(tc.secret)
		for _, leak := range []string{tc.secret, strings.ReplaceAll(tc.secret, "@", "%40"), quoted[1 : len(quoted)-1], "first-pw"} {
			if strings.Contains(msg, leak) {
				t.Errorf("connect to %s: the error shows %q: %s", tc.url, leak, msg)
			}
		}
		if !strings.Contains(msg, "127.0.0.1") {
			t.Errorf("connect to %s: the error no longer names the server: %s", tc.url, msg)
		}
	}
}
