package natsconn_test

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/natsconn"
)

// The liveness settings are --nats-* flags of every service, each also
// read from its GANTRY_NATS_* variable; the CLI, without those flags,
// reads the variables in Resolved.
func TestLivenessFlagsAndEnvironment(t *testing.T) {
	var f natsconn.ServiceFlags
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	t.Setenv("GANTRY_NATS_PING_INTERVAL", "2s")
	if err := natsconn.ParseService(fs, []string{"--nats-spread", "0"}, "svc", "", nil); err != nil {
		t.Fatal(err)
	}
	want := natsconn.Liveness{PingInterval: 2 * time.Second, PingsOut: natsconn.DefaultPingsOut, ReconnectWait: natsconn.DefaultReconnectWait,
		ReconnectMaxWait: natsconn.DefaultReconnectMaxWait, Spread: 0}
	if f.Liveness != want {
		t.Errorf("service flags: %+v, want %+v", f.Liveness, want)
	}
	t.Setenv("GANTRY_NATS_PINGS_OUT", "3")
	t.Setenv("GANTRY_NATS_SPREAD", "1m")
	o, err := natsconn.Options{}.Resolved()
	if err != nil || o.PingInterval != 2*time.Second || o.PingsOut != 3 || o.Spread != time.Minute {
		t.Errorf("Resolved: %+v %v", o.Liveness, err)
	}
	t.Setenv("GANTRY_NATS_PING_INTERVAL", "often")
	if _, err := (natsconn.Options{}).Resolved(); err == nil || !strings.Contains(err.Error(), "$GANTRY_NATS_PING_INTERVAL") {
		t.Errorf("a bad variable: %v", err)
	}
}
