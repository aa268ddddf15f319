package servicemain

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"
)

// PProfHandler serves Go's profiles under /debug/pprof/, and nothing
// else.
func PProfHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// ServePProf serves PProfHandler at addr for as long as the process runs
// (--pprof; nothing when addr is empty). An address it cannot listen on
// is logged, and the service runs without.
func ServePProf(addr string, log *slog.Logger) {
	if addr == "" {
		return
	}
	srv := &http.Server{Addr: addr, Handler: PProfHandler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { log.Warn("pprof", "err", srv.ListenAndServe()) }()
	log.Info("serving pprof", "url", "http://"+addr+"/debug/pprof/")
}
