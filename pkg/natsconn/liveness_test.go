package natsconn_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/natsconn"
)

// The CLI, without the --nats-* flags, reads the liveness settings from
// their GANTRY_NATS_* variables in Resolved (the services' flags take
// them: internal/servicemain).
func TestLivenessEnvironment(t *testing.T) {
	env := map[string]string{"GANTRY_NATS_PING_INTERVAL": "2s", "GANTRY_NATS_PINGS_OUT": "3", "GANTRY_NATS_SPREAD": "1m"}
	o, err := natsconn.Options{}.Resolved(func(k string) string { return env[k] })
	if err != nil || o.PingInterval != 2*time.Second || o.PingsOut != 3 || o.Spread != time.Minute {
		t.Errorf("Resolved: %+v %v", o.Liveness, err)
	}
	env["GANTRY_NATS_PING_INTERVAL"] = "often"
	if _, err := (natsconn.Options{}).Resolved(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "$GANTRY_NATS_PING_INTERVAL") {
		t.Errorf("a bad variable: %v", err)
	}
	if o, err := (natsconn.Options{}).Resolved(nil); err != nil || o.PingInterval != 0 || o.URL != natsconn.DefaultURL {
		t.Errorf("no environment: %+v %v", o, err)
	}
}
