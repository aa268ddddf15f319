package webview

import "github.com/prometheus/client_golang/prometheus"

// Registry holds the web view's metrics alone: what gantry ui serves
// (with metricsserve.Only). They are on the default registry too, with
// every service's, for gantry dev.
var Registry = prometheus.NewRegistry()

// The web view's metrics.
var (
	metricStreams = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gantry_webview_streams",
		Help: "Pages open in a browser, workflow and list pages: server-sent event streams being served.",
	})
	metricMessages = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gantry_webview_messages_sent_total",
		Help: "Server-sent events written to browsers (snapshots and changes).",
	})
	metricRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gantry_webview_streams_refused_total",
		Help: "Pages (workflow or list) refused because MaxStreams were already open.",
	})
	refusedEvents = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gantry_webview_events_refused_total",
		Help: "Events not drawn because they did not come the way their type comes (a forged or misrouted message).",
	})
)

func init() {
	for _, r := range []prometheus.Registerer{prometheus.DefaultRegisterer, Registry} {
		r.MustRegister(metricStreams, metricMessages, metricRefused, refusedEvents)
	}
}
