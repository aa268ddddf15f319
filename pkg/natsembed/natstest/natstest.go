// Package natstest starts the real NATS server for tests, with gantry's
// accounts and permissions on as in production, and connects to it as any
// identity (or as busauth.Admin, to look at streams and buckets).
package natstest

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/nats-io/nats.go"
)

// Server is an embedded server and the keys of every identity.
type Server struct {
	*natsembed.Server
	Keys *busauth.Keys
	t    testing.TB
	cfg  natsembed.Config
}

// Start starts a server with JetStream in a temporary directory; a client
// with no credentials is a viewer, as in gantry dev. It stops when the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, natsembed.Config{})
}

// StartWith starts a server with cfg, filling StoreDir and Auth (with
// Admin) when they are empty.
func StartWith(t testing.TB, cfg natsembed.Config) *Server {
	t.Helper()
	dir := t.TempDir()
	if cfg.StoreDir == "" {
		cfg.StoreDir = filepath.Join(dir, "js")
	}
	if cfg.Auth == nil {
		keys, err := busauth.LoadOrCreate(filepath.Join(dir, "auth"), busauth.Admin)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Auth, cfg.AnonymousViewer = keys, !cfg.OperatorMode
	}
	ns, err := natsembed.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	cfg.Port = ns.Addr().(*net.TCPAddr).Port
	return &Server{Server: ns, Keys: cfg.Auth, t: t, cfg: cfg}
}

// StoreDir is where the server keeps JetStream's files.
func (s *Server) StoreDir() string { return s.cfg.StoreDir }

// StartAgain starts the server again after Stop, on the same port and
// storage.
func (s *Server) StartAgain() {
	s.t.Helper()
	ns, err := natsembed.Start(s.cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(ns.Stop)
	s.Server = ns
}

// Options are the connection options of identity id (its nkey or creds,
// and inbox prefix), plus extra.
func (s *Server) Options(id events.Identity, extra ...nats.Option) []nats.Option {
	s.t.Helper()
	return options(s.t, s.Keys, id, extra...)
}

func options(t testing.TB, keys *busauth.Keys, id events.Identity, extra ...nats.Option) []nats.Option {
	t.Helper()
	creds, seed := keys.Credentials(id)
	opt := nats.UserCredentials(creds)
	if seed != "" {
		var err error
		if opt, err = nats.NkeyOptionFromSeed(seed); err != nil {
			t.Fatal(err)
		}
	}
	inbox := "_INBOX"
	if id != busauth.Admin {
		inbox = id.InboxPrefix()
	}
	return append([]nats.Option{opt, nats.CustomInboxPrefix(inbox), nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, extra...)
}

// Connect connects as identity id; the connection closes when the test
// ends.
func (s *Server) Connect(id events.Identity, extra ...nats.Option) *nats.Conn {
	s.t.Helper()
	nc, err := nats.Connect(s.URL(), s.Options(id, extra...)...)
	if err != nil {
		s.t.Fatalf("connect as %s: %v", id, err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}
