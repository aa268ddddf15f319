// Package natsembed runs a NATS server with JetStream inside the process,
// for `gantry dev` and for integration tests: the real nats-server, on
// loopback, with file storage in a directory of the caller's.
package natsembed

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config of an embedded server.
type Config struct {
	Host     string // default 127.0.0.1
	Port     int    // 0 picks a free port
	StoreDir string // JetStream file storage; required
	// SyncAlways fsyncs every write (survives power loss, slower); the
	// default syncs every 2 minutes like nats-server (survives a process
	// kill, not a power loss).
	SyncAlways bool
}

// Server is a running embedded server.
type Server struct {
	*server.Server
}

// Start starts a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsembed: StoreDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:         "gantry-dev",
		Host:               cfg.Host,
		Port:               port,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		SyncAlways:         cfg.SyncAlways,
		NoSigs:             true,
		MaxPayload:         server.MAX_PAYLOAD_SIZE,
		JetStreamMaxMemory: 256 << 20,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("natsembed: server on %s not ready after 15s", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
	}
	return &Server{ns}, nil
}

// URL is the client URL.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
