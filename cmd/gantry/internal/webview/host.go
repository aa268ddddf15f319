package webview

import (
	"encoding/json"
	"net/http"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// host is a host's page as JSON: state.host's nodes of that host, one per
// node of a composition that ran there (its last state, what is in place,
// its last check), as the state-store keeps them.
func (s *Server) host(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("host")
	if p := dag.HostNameProblem(name); p != "" {
		http.Error(w, "host name "+p, http.StatusBadRequest)
		return
	}
	nodes, err := s.Src.Host(r.Context(), name)
	if err != nil {
		s.log().Warn("web view: host", "host", name, "err", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if nodes == nil {
		nodes = []events.HostNode{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(nodes)
}
