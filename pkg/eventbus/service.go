package eventbus

import (
	"encoding/json"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Each status also says whether JetStream stores the instance's writes
// (Storage: ok, or the streams and buckets its writes fail on and why).

// ServiceSpec describes a service's NATS micro service.
type ServiceSpec struct {
	ID          events.Identity
	Version     string // a semantic version (buildinfo.Version)
	Instance    string // this process ("executor/<host>-<pid>"), in the metadata
	Description string
	// Status is this instance's status (one of the *Status types): the
	// status endpoint's reply and its data in `nats micro stats`.
	Status func() any
	// Storage is what the instance sees of JetStream storage, for its
	// status (nil: nothing observed).
	Storage *Storage
}

// AddService adds the service, with its status endpoint. The caller adds
// any other endpoints, and stops it.
func AddService(nc *nats.Conn, s ServiceSpec) (micro.Service, error) {
	status := func(e *micro.Endpoint) any {
		if e.Name != events.StatusEndpoint {
			return nil
		}
		return s.Status()
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:         s.ID.ServiceName(),
		Version:      s.Version,
		Description:  s.Description,
		Metadata:     map[string]string{"instance": s.Instance},
		StatsHandler: status,
	})
	if err != nil {
		return nil, fmt.Errorf("micro service %s: %w", s.ID.ServiceName(), err)
	}
	err = svc.AddEndpoint(events.StatusEndpoint, OnlyRequests(micro.HandlerFunc(func(req micro.Request) {
		b, err := json.Marshal(s.Status())
		if err != nil {
			_ = req.Error("500", err.Error(), nil)
			return
		}
		_ = req.Respond(b)
	})), micro.WithEndpointSubject(events.StatusSubject(s.ID)))
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("micro service %s: status endpoint: %w", s.ID.ServiceName(), err)
	}
	return svc, nil
}
