package busauth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Operator mode: the same accounts, users and permissions as user JWTs,
// signed by an operator key and the two account keys, as nsc would make
// them. Each identity gets a creds file (its user JWT and nkey seed), and
// a request's Nats-Request-Info then names the user as well.

// ErrAnonymousOperatorMode: nats-server has no no_auth_user in operator mode.
var ErrAnonymousOperatorMode = errors.New("a client without credentials cannot be a viewer in operator mode (nats-server has no no_auth_user there)")

// CredsFile is the path of an identity's creds file (operator mode).
func (k *Keys) CredsFile(id events.Identity) string {
	return filepath.Join(k.Dir, string(id)+".creds")
}

// signers are the operator's and the accounts' keys.
type signers struct {
	operator, services, clients, system nkeys.KeyPair
}

func (k *Keys) loadSigners() (signers, error) {
	dir := filepath.Join(k.Dir, "signing")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return signers{}, err
	}
	load := func(name string, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
		path := filepath.Join(dir, name+".nk")
		if b, err := os.ReadFile(path); err == nil {
			return nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		}
		kp, err := create()
		if err != nil {
			return nil, err
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		return kp, os.WriteFile(path, append(seed, '\n'), 0o600)
	}
	var s signers
	var err error
	if s.operator, err = load("operator", nkeys.CreateOperator); err != nil {
		return s, fmt.Errorf("operator key: %w", err)
	}
	for _, a := range []struct {
		dst  *nkeys.KeyPair
		name string
	}{{&s.services, events.AccountServices}, {&s.clients, events.AccountClients}, {&s.system, "SYS"}} {
		if *a.dst, err = load(a.name, nkeys.CreateAccount); err != nil {
			return s, fmt.Errorf("account %s key: %w", a.name, err)
		}
	}
	return s, nil
}

// operatorConfig writes every identity's creds file and returns the
// server configuration of operator mode: the operator JWT, the system
// account, and the account JWTs preloaded in a memory resolver.
func (k *Keys) operatorConfig() (map[string]any, error) {
	s, err := k.loadSigners()
	if err != nil {
		return nil, err
	}
	pub := func(kp nkeys.KeyPair) string { p, _ := kp.PublicKey(); return p }
	op := jwt.NewOperatorClaims(pub(s.operator))
	op.Name, op.SystemAccount = "gantry", pub(s.system)
	opJWT, err := op.Encode(s.operator)
	if err != nil {
		return nil, fmt.Errorf("operator jwt: %w", err)
	}
	services := jwt.NewAccountClaims(pub(s.services))
	services.Name = events.AccountServices
	services.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	clients := jwt.NewAccountClaims(pub(s.clients))
	clients.Name = events.AccountClients
	for _, im := range events.ClientImports() {
		e := &jwt.Export{Subject: jwt.Subject(im.Subject), Type: jwt.Stream}
		i := &jwt.Import{Subject: jwt.Subject(im.Subject), Account: pub(s.services), Type: jwt.Stream}
		if im.Service {
			e.Type, i.Type, i.Share = jwt.Service, jwt.Service, im.Share
			if im.Multiple {
				e.ResponseType = jwt.ResponseTypeStream
			}
		}
		services.Exports.Add(e)
		clients.Imports.Add(i)
	}
	system := jwt.NewAccountClaims(pub(s.system))
	system.Name = "SYS"
	preload := map[string]string{}
	for _, ac := range []*jwt.AccountClaims{services, clients, system} {
		t, err := ac.Encode(s.operator)
		if err != nil {
			return nil, fmt.Errorf("account %s jwt: %w", ac.Name, err)
		}
		preload[ac.Subject] = t
	}
	if err := k.writeCreds(s); err != nil {
		return nil, err
	}
	return map[string]any{"operator": opJWT, "system_account": pub(s.system), "resolver": "MEMORY", "resolver_preload": preload}, nil
}

// writeCreds signs a user JWT for every identity with its account's key.
func (k *Keys) writeCreds(s signers) error {
	for id, seed := range k.seeds {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			return err
		}
		upub, _ := kp.PublicKey()
		uc := jwt.NewUserClaims(upub)
		uc.Name = string(id)
		p := events.PermissionsFor(id)
		if id == Admin {
			p = adminPermissions
		}
		uc.Pub.Allow.Add(p.PublishAllow...)
		uc.Pub.Deny.Add(p.PublishDeny...)
		uc.Sub.Allow.Add(p.SubscribeAllow...)
		uc.Sub.Deny.Add(p.SubscribeDeny...)
		if p.Respond {
			uc.Resp = &jwt.ResponsePermission{MaxMsgs: 1, Expires: 2 * time.Minute}
		}
		signer := s.services
		if id.Account() == events.AccountClients {
			signer = s.clients
		}
		t, err := uc.Encode(signer)
		if err != nil {
			return fmt.Errorf("user %s jwt: %w", id, err)
		}
		creds, err := jwt.FormatUserConfig(t, seed)
		if err != nil {
			return err
		}
		if err := os.WriteFile(k.CredsFile(id), creds, 0o600); err != nil {
			return err
		}
	}
	return nil
}
