// Package busauth makes gantry's NATS identities and the server
// configuration that authenticates and authorises them: one nkey per
// identity (written as a seed file the nats CLI takes with --nkey), and a
// nats-server accounts block with each identity's permissions, as
// pkg/events derives them, and the imports that let people reach what they
// may use. gantry dev, the compose stack and the tests all use it.
package busauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nkeys"
)

// Admin is an identity only tests use: every permission in the services'
// account, to look at streams and buckets. gantry dev and compose never
// write it.
const Admin events.Identity = "admin"

// Identities are those a Keys holds: the services and the people.
func Identities() []events.Identity {
	return append(append([]events.Identity{}, events.Services...), events.People...)
}

// Keys holds one nkey seed per identity.
type Keys struct {
	Dir   string // where the seeds are, one <identity>.nk each
	seeds map[events.Identity][]byte
	// jwt is set once the server configuration is operator mode: the
	// identities then connect with their creds files.
	jwt bool
}

// ErrUnknownIdentity is returned for an identity Keys does not hold.
var ErrUnknownIdentity = errors.New("unknown identity")

// LoadOrCreate reads the seed of every identity from dir, making the
// missing ones (and dir, mode 0700; seeds 0600). Extra identities (Admin)
// are made as well.
func LoadOrCreate(dir string, extra ...events.Identity) (*Keys, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("auth dir: %w", err)
	}
	k := &Keys{Dir: dir, seeds: map[events.Identity][]byte{}}
	for _, id := range append(Identities(), extra...) {
		seed, err := loadOrCreate(k.SeedFile(id))
		if err != nil {
			return nil, fmt.Errorf("identity %s: %w", id, err)
		}
		k.seeds[id] = seed
	}
	return k, nil
}

func loadOrCreate(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		seed := []byte(strings.TrimSpace(string(b)))
		if _, err := nkeys.FromSeed(seed); err != nil {
			return nil, fmt.Errorf("%s: not an nkey seed: %w", path, err)
		}
		return seed, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		return nil, err
	}
	return seed, nil
}

// SeedFile is the path of an identity's seed file.
func (k *Keys) SeedFile(id events.Identity) string {
	return filepath.Join(k.Dir, string(id)+".nk")
}

// Public is an identity's public nkey (the user the server knows).
func (k *Keys) Public(id events.Identity) (string, error) {
	seed, ok := k.seeds[id]
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownIdentity, id)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// Names maps every public key to its identity's name, to name the user
// of a request's Nats-Request-Info.
func (k *Keys) Names() map[string]string {
	m := map[string]string{}
	for id := range k.seeds {
		if pub, err := k.Public(id); err == nil {
			m[pub] = string(id)
		}
	}
	return m
}

// ServerOptions shape the rendered configuration.
type ServerOptions struct {
	// AnonymousViewer makes a client with no credentials a viewer
	// (no_auth_user): gantry dev and the local compose stack.
	AnonymousViewer bool
	// OperatorMode renders user JWTs signed by an operator and account
	// keys (and writes each identity's creds file) instead of nkey users.
	OperatorMode bool
}

// Credentials is what identity id connects with: its creds file in
// operator mode, else its nkey seed file.
func (k *Keys) Credentials(id events.Identity) (creds, nkey string) {
	if k.jwt {
		return k.CredsFile(id), ""
	}
	return "", k.SeedFile(id)
}

// adminPermissions are Admin's: everything in the services' account.
var adminPermissions = events.Permissions{PublishAllow: []string{">"}, SubscribeAllow: []string{">"}}

// ServerConfig renders the nats-server configuration of the two accounts
// with every identity's user and permissions: a JSON document, which
// nats-server's configuration parser reads as it is, to include from a
// server's own configuration or to run as it is.
func (k *Keys) ServerConfig(o ServerOptions) (string, error) {
	if o.OperatorMode {
		if o.AnonymousViewer {
			return "", ErrAnonymousOperatorMode
		}
		cfg, err := k.operatorConfig()
		if err != nil {
			return "", err
		}
		k.jwt = true
		cfg["max_payload"] = eventbus.MaxRequestBytes
		return encodeConfig(cfg)
	}
	services, clients := account{JetStream: "enabled"}, account{}
	for _, id := range Identities() {
		u, err := k.user(id, events.PermissionsFor(id))
		if err != nil {
			return "", err
		}
		if id.Account() == events.AccountClients {
			clients.Users = append(clients.Users, u)
		} else {
			services.Users = append(services.Users, u)
		}
	}
	if _, ok := k.seeds[Admin]; ok {
		u, err := k.user(Admin, adminPermissions)
		if err != nil {
			return "", err
		}
		services.Users = append(services.Users, u)
	}
	for _, im := range events.ClientImports() {
		services.Exports = append(services.Exports, exportOf(im))
		clients.Imports = append(clients.Imports, importOf(im))
	}
	cfg := map[string]any{"accounts": map[string]account{events.AccountServices: services, events.AccountClients: clients},
		"max_payload": eventbus.MaxRequestBytes}
	if o.AnonymousViewer {
		pub, err := k.Public(events.Viewer)
		if err != nil {
			return "", err
		}
		cfg["no_auth_user"] = pub
	}
	return encodeConfig(cfg)
}

// encodeConfig writes a configuration as JSON that nats-server's parser
// reads.
func encodeConfig(cfg map[string]any) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // nats-server's parser knows no \u escapes; subjects hold '>'
	enc.SetIndent("", "  ")
	err := enc.Encode(cfg)
	return b.String(), err
}

// WriteServerConfig writes ServerConfig to dir/server.conf (mode 0600: it
// names every user) and returns its path: `nats-server -c` runs it, or a
// server's own configuration includes it.
func (k *Keys) WriteServerConfig(o ServerOptions) (string, error) {
	conf, err := k.ServerConfig(o)
	if err != nil {
		return "", err
	}
	path := filepath.Join(k.Dir, "server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return "", err
	}
	return path, nil
}

type account struct {
	JetStream string      `json:"jetstream,omitempty"`
	Users     []user      `json:"users"`
	Exports   []exportCfg `json:"exports,omitempty"`
	Imports   []importCfg `json:"imports,omitempty"`
}

type user struct {
	Nkey        string      `json:"nkey"`
	Permissions permissions `json:"permissions"`
}

type permissions struct {
	Publish        allowDeny `json:"publish"`
	Subscribe      allowDeny `json:"subscribe"`
	AllowResponses bool      `json:"allow_responses,omitempty"`
}

type allowDeny struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny,omitempty"`
}

type exportCfg struct {
	Service      string   `json:"service,omitempty"`
	Stream       string   `json:"stream,omitempty"`
	ResponseType string   `json:"response_type,omitempty"`
	Accounts     []string `json:"accounts"`
}

type importCfg struct {
	Service *source `json:"service,omitempty"`
	Stream  *source `json:"stream,omitempty"`
	Share   bool    `json:"share,omitempty"`
}

type source struct {
	Account string `json:"account"`
	Subject string `json:"subject"`
}

func (k *Keys) user(id events.Identity, p events.Permissions) (user, error) {
	pub, err := k.Public(id)
	if err != nil {
		return user{}, err
	}
	return user{Nkey: pub, Permissions: permissions{
		Publish:        allowDeny{Allow: p.PublishAllow, Deny: p.PublishDeny},
		Subscribe:      allowDeny{Allow: p.SubscribeAllow, Deny: p.SubscribeDeny},
		AllowResponses: p.Respond,
	}}, nil
}

func exportOf(im events.Import) exportCfg {
	e := exportCfg{Accounts: []string{events.AccountClients}}
	if !im.Service {
		e.Stream = im.Subject
		return e
	}
	e.Service = im.Subject
	if im.Multiple {
		e.ResponseType = "stream"
	}
	return e
}

func importOf(im events.Import) importCfg {
	src := &source{Account: events.AccountServices, Subject: im.Subject}
	if im.Service {
		return importCfg{Service: src, Share: im.Share}
	}
	return importCfg{Stream: src}
}
