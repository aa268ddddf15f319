// Package natsconn connects gantry's processes to NATS with the same
// options everywhere: credentials (creds file, nkey seed, user and
// password), TLS, a `nats` CLI context, the `nats` CLI's environment
// variables, pings that find a dead server in seconds, reconnecting
// forever with growing, jittered waits, spreading back over a cluster's
// servers (liveness.go, failover.go, spread.go), and logged state
// changes that never show a URL's password.
package natsconn

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultURL is used when neither --server, NATS_URL nor a context names one.
const DefaultURL = "nats://127.0.0.1:4222"

// Options say where and as whom to connect. Empty fields take the `nats`
// CLI's environment variables, then the context's values.
type Options struct {
	URL      string // --server, $NATS_URL
	Creds    string // --creds, $NATS_CREDS: user JWT and nkey seed
	NKey     string // --nkey, $NATS_NKEY: nkey seed file
	User     string // $NATS_USER
	Password string // $NATS_PASSWORD
	CA       string // --tls-ca, $NATS_CA
	Cert     string // --tls-cert, $NATS_CERT
	Key      string // --tls-key, $NATS_KEY
	Context  string // --context, $NATS_CONTEXT: a `nats` CLI context name or file
	// InboxPrefix is the prefix of reply subjects (an identity's own,
	// see events.Identity.InboxPrefix); default _INBOX.
	InboxPrefix string
	Liveness    // pings, reconnect waits, spreading: --nats-*, $GANTRY_NATS_*
}

// Register adds --server, --creds, --nkey, --tls-ca, --tls-cert, --tls-key
// and --context to fs.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.URL, "server", "", "NATS URL ($NATS_URL, else the context's, else "+DefaultURL+")")
	o.RegisterCredentials(fs)
	o.registerLiveness(fs)
}

// RegisterCredentials adds every flag of Register but --server.
func (o *Options) RegisterCredentials(fs *flag.FlagSet) {
	fs.StringVar(&o.Creds, "creds", "", "NATS credentials file: user JWT and nkey seed ($NATS_CREDS)")
	fs.StringVar(&o.NKey, "nkey", "", "NATS nkey seed file ($NATS_NKEY)")
	fs.StringVar(&o.CA, "tls-ca", "", "CA certificate that signs the NATS server's ($NATS_CA)")
	fs.StringVar(&o.Cert, "tls-cert", "", "client certificate for NATS TLS ($NATS_CERT)")
	fs.StringVar(&o.Key, "tls-key", "", "client certificate's key ($NATS_KEY)")
	fs.StringVar(&o.Context, "context", "", "nats CLI context name or file ($NATS_CONTEXT, else the selected context)")
}

// FlagEnv are the connection flags' environment variables: those of the
// nats CLI.
var FlagEnv = map[string]string{
	"server": "NATS_URL", "creds": "NATS_CREDS", "nkey": "NATS_NKEY",
	"tls-ca": "NATS_CA", "tls-cert": "NATS_CERT", "tls-key": "NATS_KEY", "context": "NATS_CONTEXT",
}

// Resolved fills every empty field from the environment getenv reads
// (os.Getenv in a process; nil: none), then from the context (named, or
// the one the nats CLI has selected), then DefaultURL. The variables are
// the nats CLI's (FlagEnv, NATS_USER, NATS_PASSWORD) and the liveness
// settings' GANTRY_NATS_*; XDG_CONFIG_HOME says where the contexts are.
func (o Options) Resolved(getenv func(string) string) (Options, error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	env := func(p *string, name string) {
		if *p == "" {
			*p = getenv(name)
		}
	}
	env(&o.URL, "NATS_URL")
	env(&o.Creds, "NATS_CREDS")
	env(&o.NKey, "NATS_NKEY")
	env(&o.User, "NATS_USER")
	env(&o.Password, "NATS_PASSWORD")
	env(&o.CA, "NATS_CA")
	env(&o.Cert, "NATS_CERT")
	env(&o.Key, "NATS_KEY")
	env(&o.Context, "NATS_CONTEXT")
	if err := o.fromEnv(getenv); err != nil {
		return o, err
	}
	c, err := loadContext(o.Context, getenv)
	if err != nil {
		return o, err
	}
	for _, f := range []struct {
		dst *string
		v   string
	}{
		{&o.URL, c.URL}, {&o.Creds, c.Creds}, {&o.NKey, c.NKey}, {&o.User, c.User}, {&o.Password, c.Password},
		{&o.CA, c.CA}, {&o.Cert, c.Cert}, {&o.Key, c.Key}, {&o.InboxPrefix, c.InboxPrefix},
	} {
		if *f.dst == "" {
			*f.dst = f.v
		}
	}
	if o.URL == "" {
		o.URL = DefaultURL
	}
	return o, nil
}

// HasCredentials says whether any way of authenticating is set.
func (o Options) HasCredentials() bool {
	return o.Creds != "" || o.NKey != "" || o.User != "" || strings.Contains(o.URL, "@")
}

// ErrBadOptions is wrapped by every error about the options themselves.
var ErrBadOptions = errors.New("bad NATS connection options")

func (o Options) natsOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if o.Creds != "" && o.NKey != "" {
		return nil, fmt.Errorf("%w: give --creds or --nkey, not both", ErrBadOptions)
	}
	if o.Creds != "" {
		if _, err := os.Stat(o.Creds); err != nil {
			return nil, fmt.Errorf("%w: --creds: %w", ErrBadOptions, err)
		}
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.NKey != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKey)
		if err != nil {
			return nil, fmt.Errorf("%w: --nkey %s: %w", ErrBadOptions, o.NKey, err)
		}
		opts = append(opts, opt)
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if (o.Cert == "") != (o.Key == "") {
		return nil, fmt.Errorf("%w: --tls-cert and --tls-key go together", ErrBadOptions)
	}
	if o.Cert != "" {
		opts = append(opts, nats.ClientCert(o.Cert, o.Key))
	}
	if o.CA != "" {
		opts = append(opts, nats.RootCAs(o.CA))
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	return opts, nil
}

// Redact returns u with any password (or token) in its userinfo replaced
// by ***, for messages and logs. Several comma-separated URLs are each
// redacted.
func Redact(u string) string {
	parts := strings.Split(u, ",")
	creds := strings.Contains(u, "@")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		pu, err := url.Parse(p)
		switch {
		case strings.Contains(p, "@") && (err != nil || !strings.Contains(p, "://")):
			// unparsed, or with no scheme (nats.go adds nats://), which
			// url.Parse reads as the user for a scheme and the password
			// as the opaque rest
			parts[i] = "***@" + p[strings.LastIndex(p, "@")+1:]
		case err != nil && creds:
			parts[i] = "***" // maybe the start of a password with a comma in it
		case err != nil || pu.User == nil:
			parts[i] = p
		default:
			who := "***"
			if _, has := pu.User.Password(); has {
				who = pu.User.Username() + ":***"
			}
			pu.User = nil
			rest := strings.TrimPrefix(pu.String(), pu.Scheme+"://")
			parts[i] = pu.Scheme + "://" + who + "@" + rest
		}
	}
	return strings.Join(parts, ",")
}

// Connect connects as name ("gantry-executor") with o as it is (see
// Resolved for the environment and contexts). Services keep reconnecting
// for as long as they run; a one-shot CLI call should pass retry=false.
func Connect(o Options, name string, log *slog.Logger, retry bool) (*nats.Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	if o.URL == "" {
		o.URL = DefaultURL
	}
	opts, err := o.natsOptions()
	if err != nil {
		return nil, err
	}
	f := newFailover(o.Liveness, log)
	opts = append(opts, f.options()...)
	opts = append(opts,
		nats.Name(name),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { f.up(c); log.Info("nats reconnected", "url", c.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("nats error", "subject", subject, "err", err)
		}),
	)
	if retry {
		// IgnoreAuthErrorAbort: a server that refuses the credentials while
		// it restarts (its accounts not loaded yet) would otherwise close
		// the connection for good after the second refusal.
		opts = append(opts, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort())
		opts = append(opts, nats.ReconnectBufSize(-1)) // nothing kept to send while down: a publish fails at once (eventbus.Outbox)
	} else {
		opts = append(opts, nats.Timeout(5*time.Second))
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, &connectError{url: o.URL, err: err}
	}
	if retry && f.cfg.Spread > 0 {
		s := &spreader{nc: nc, f: f, every: f.cfg.Spread, log: log}
		f.setOnUp(s.connected)
		go s.run()
	}
	return nc, nil
}

// connectError is a failed connection to url. Its message has url's
// passwords and tokens replaced by ***: nats.go quotes the whole URL when
// it cannot parse it (a typo in the port is enough).
type connectError struct {
	url string
	err error
}

func (e *connectError) Error() string {
	var bad *url.Error
	if errors.As(e.err, &bad) && strings.Contains(e.url, "@") {
		// what url.Parse quotes may be a piece of the password (one with a
		// comma is cut in two), so none of it is shown
		return scrub(fmt.Sprintf("connect to NATS at %s: the URL does not parse (the reason is not shown: it would quote the URL, password and all)", Redact(e.url)), e.url)
	}
	return scrub(fmt.Sprintf("connect to NATS at %s: %v", Redact(e.url), e.err), e.url)
}

func (e *connectError) Unwrap() error { return e.err }

// scrub replaces in msg each of the comma-separated urls, as written and
// as Go quotes it, by its redacted form, then whatever is left of their
// passwords and tokens by ***.
func scrub(msg, urls string) string {
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, quotedInner(u), Redact(u))
		msg = strings.ReplaceAll(msg, u, Redact(u))
		for _, s := range secretsOf(u) {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return msg
}

// secretsOf returns the password (or the token) in u's userinfo as
// written, unescaped and quoted, whether or not u parses.
func secretsOf(u string) []string {
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return nil
	}
	info := u[:at]
	if i := strings.Index(info, "://"); i >= 0 {
		info = info[i+3:]
	}
	secret := info
	if i := strings.Index(info, ":"); i >= 0 {
		secret = info[i+1:]
	}
	forms := []string{secret, quotedInner(secret)}
	if s, err := url.PathUnescape(secret); err == nil {
		forms = append(forms, s, quotedInner(s))
	}
	var out []string
	for _, f := range forms {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// quotedInner is s as %q writes it, without the quotes.
func quotedInner(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
