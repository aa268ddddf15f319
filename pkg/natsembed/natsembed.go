// Package natsembed runs a NATS server with JetStream inside the process,
// for `gantry dev` and for integration tests: the real nats-server, on
// loopback, with file storage in a directory of the caller's, and always
// with gantry's accounts, users and permissions (pkg/busauth), optionally
// over TLS.
package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/eventbus"
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
	// Auth holds the identities; required: there is no server without
	// authentication.
	Auth *busauth.Keys
	// AnonymousViewer makes a client without credentials a viewer.
	AnonymousViewer bool
	// OperatorMode runs the server in operator mode: user JWTs, each
	// identity with a creds file (Auth.CredsFile).
	OperatorMode bool
	// TLS, when set, makes the server require TLS on client connections.
	TLS *TLS
	// Name is the server's name (default gantry-dev); the servers of a
	// cluster each need their own.
	Name string
	// Cluster, when set, makes the server one node of a cluster.
	Cluster *Cluster
	// MaxStore, when set, is the most JetStream may store on disk (the
	// server's max_file_store); when 0 the server takes three quarters of
	// the space free in StoreDir at its start.
	MaxStore int64
	// Log gets what the server does about storage on its own: a stream
	// that hit a write error, and loading it again once there is room
	// (default slog.Default()).
	Log *slog.Logger
}

// Cluster is a server's place in a cluster: the cluster's name, the port
// it takes routes on (on Host), the routes to the other nodes
// (nats-route://user:password@host:port) and the user and password routes
// to this node must give.
type Cluster struct {
	Name           string
	Port           int
	Routes         []string
	User, Password string
	// NoAdvertise keeps the other nodes' client URLs from clients: a
	// client reconnects only to the servers it was given.
	NoAdvertise bool
}

// A client that stops answering (a process stopped with SIGSTOP, a host
// gone without closing its connections) is dropped once PingsOut pings
// sent every PingInterval have gone unanswered: within about
// (PingsOut+1)*PingInterval, so it leaves the queue groups of the micro
// services it serves instead of taking its share of their requests
// unanswered. nats-server's own default is a ping every 2 minutes.
const (
	PingInterval = 3 * time.Second
	PingsOut     = 2
)

// TLS is the server's certificate and key, and the CA that signs the
// clients' certificates (when VerifyClients, a client must present one).
type TLS struct {
	Cert, Key, CA string
	VerifyClients bool
}

// Server is a running embedded server.
type Server struct {
	*server.Server
	repair *repairer
}

// Start starts a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsembed: StoreDir is required")
	}
	if cfg.Auth == nil {
		return nil, errors.New("natsembed: Auth is required")
	}
	opts, err := authOptions(cfg)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts.ServerName = cfg.Name
	if opts.ServerName == "" {
		opts.ServerName = "gantry-dev"
	}
	opts.PingInterval, opts.MaxPingsOut = PingInterval, PingsOut
	opts.Host, opts.Port = cfg.Host, port
	opts.JetStream, opts.StoreDir, opts.SyncAlways = true, cfg.StoreDir, cfg.SyncAlways
	opts.NoSigs = true
	opts.MaxPayload = eventbus.MaxRequestBytes
	opts.JetStreamMaxMemory = 256 << 20
	if err := clusterOptions(opts, cfg); err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	if err := portFree(cfg.Host, cfg.Port); err != nil {
		return nil, err
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
	r := newRepairer(ns, cfg.StoreDir, cfg.Log)
	r.start()
	return &Server{Server: ns, repair: r}, nil
}

// portFree says whether the client port can be listened on (0: any port
// can): nats-server itself only logs that it cannot and never becomes
// ready, so a port in use would be found only when the wait for it ran
// out.
func portFree(host string, port int) error {
	if port == 0 {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("natsembed: NATS client port %d: %w", port, err)
	}
	return ln.Close()
}

func clusterOptions(opts *server.Options, cfg Config) error {
	c := cfg.Cluster
	if c == nil {
		return nil
	}
	if c.Name == "" || c.Port == 0 {
		return errors.New("a cluster needs a name and a route port")
	}
	opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port = c.Name, cfg.Host, c.Port
	opts.Cluster.Username, opts.Cluster.Password, opts.Cluster.NoAdvertise = c.User, c.Password, c.NoAdvertise
	if len(c.Routes) > 0 {
		opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
		if len(opts.Routes) != len(c.Routes) {
			return errors.New("a cluster route does not parse")
		}
	}
	return nil
}

// URL is the client URL.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	if s.repair != nil {
		s.repair.close()
	}
	s.Shutdown()
	s.WaitForShutdown()
}

// authOptions reads the accounts configuration busauth renders (written
// next to the keys, so an operator can read what the server enforces) and
// the TLS settings, through nats-server's own configuration parser.
func authOptions(cfg Config) (*server.Options, error) {
	path, err := cfg.Auth.WriteServerConfig(busauth.ServerOptions{AnonymousViewer: cfg.AnonymousViewer, OperatorMode: cfg.OperatorMode})
	if err != nil {
		return nil, err
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.TLS != nil {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key, CaFile: cfg.TLS.CA, Verify: cfg.TLS.VerifyClients})
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		opts.TLSConfig, opts.TLS, opts.TLSVerify, opts.TLSTimeout = tc, true, cfg.TLS.VerifyClients, 2
	}
	return opts, nil
}
