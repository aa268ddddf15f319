package consume

import (
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// refusedTotal counts the events a consumer refused because they did not
// come the way their type comes (events.Admit): forged, or misrouted.
var refusedTotal = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "gantry_events_refused_total",
	Help: "Events refused by a consumer because they did not come the way their type comes (wrong subject kind, or a host or workflow other than their subject's): a forged or misrouted message, never applied.",
}, []string{"consumer", "type"})

// admit applies events.Admit to a parsed message. A refused one is logged
// as a security event, counted, and reported false; the caller drops it.
func admit(o Options, subject string, seq uint64, env *events.Envelope) bool {
	err := events.Admit(subject, env)
	if err == nil {
		return true
	}
	refusedTotal.WithLabelValues(o.Name, string(env.Type)).Inc()
	o.Logger.Warn("event refused: not from where its type comes", "security", true, "consumer", o.Name,
		"subject", subject, "stream_seq", seq, "type", string(env.Type), "source", env.Source, "err", err)
	return false
}
