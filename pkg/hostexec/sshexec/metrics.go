package sshexec

import (
	"context"
	"errors"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// SSH connection metrics of every Pool in the process.
var (
	sshOpen = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "gantry_ssh_connections_open",
		Help: "SSH connections open (pooled, one per user@host and path of jump hosts).",
	})
	sshDials = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_ssh_dials_total",
		Help: "SSH connections dialed, by result: ok, auth (key refused), host_key (unknown or changed), timeout, cancelled, error (anything else: unreachable, refused).",
	}, []string{"result"})
	sshKeepaliveClosed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "gantry_ssh_keepalive_closed_total",
		Help: "SSH connections closed because their host stopped answering keepalives.",
	})
	sshSessionsRefused = promauto.NewCounter(prometheus.CounterOpts{
		Name: "gantry_ssh_sessions_refused_total",
		Help: "New SSH sessions the host's sshd refused (its MaxSessions reached on the connection); each is asked again, or waits for a session of the connection to end.",
	})
)

func init() { // every result from 0
	for _, r := range []string{"ok", "auth", "host_key", "timeout", "cancelled", "error"} {
		sshDials.WithLabelValues(r)
	}
}

// dialResult is the result label of a dial that returned err.
func dialResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, hostexec.ErrAuth):
		return "auth"
	case errors.Is(err, hostexec.ErrHostKeyUnknown), errors.Is(err, hostexec.ErrHostKeyChanged):
		return "host_key"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, hostexec.ErrTimeout):
		return "timeout"
	case errors.Is(err, context.Canceled), errors.Is(err, hostexec.ErrCancelled):
		return "cancelled"
	}
	return "error"
}
