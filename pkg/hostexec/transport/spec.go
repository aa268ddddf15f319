package transport

import (
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
)

// TargetOf is how to reach the host a dispatch's or gate request's
// host_spec names.
func TargetOf(h events.HostSpec) Target {
	t := Target{Transport: string(h.Transport), Address: h.Address, User: h.User, IdentityFile: h.IdentityFile}
	for _, j := range h.Via {
		t.Via = append(t.Via, sshexec.Jump{Address: j.Address, User: j.User, IdentityFile: j.IdentityFile})
	}
	return t
}
