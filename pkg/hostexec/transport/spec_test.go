package transport_test

import (
	"reflect"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
)

func TestTargetOf(t *testing.T) {
	for name, c := range map[string]struct {
		spec events.HostSpec
		want transport.Target
	}{
		"local": {events.HostSpec{Transport: "local"}, transport.Target{Transport: "local"}},
		"ssh with its key": {events.HostSpec{Transport: "ssh", Address: "db-1:22", User: "ops", IdentityFile: "/k"},
			transport.Target{Transport: "ssh", Address: "db-1:22", User: "ops", IdentityFile: "/k"}},
		"two jump hosts, the first hop first": {
			events.HostSpec{Transport: "ssh", Address: "10.0.0.5:22", Via: []events.Jump{{Address: "bastion:22", User: "j"}, {Address: "inner:2222", IdentityFile: "/j"}}},
			transport.Target{Transport: "ssh", Address: "10.0.0.5:22", Via: []sshexec.Jump{{Address: "bastion:22", User: "j"}, {Address: "inner:2222", IdentityFile: "/j"}}}},
	} {
		if got := transport.TargetOf(c.spec); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", name, got, c.want)
		}
	}
}
