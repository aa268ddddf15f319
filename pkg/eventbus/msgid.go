package eventbus

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/url"

	"github.com/nats-io/nats.go"
)

// Message ids that no other identity can take first. JetStream drops a
// message whose Nats-Msg-Id it has stored within the stream's duplicate
// window, whoever sent the first one; so an id anyone can work out
// ("workflow|generation|formula|node|what|attempt") lets any identity that
// may publish into a stream store a message under the id of a transition
// that has not happened yet, and the real one is then dropped. A
// publisher's wire id is its logical id with a keyed tag: an HMAC of the
// subject and the logical id under a key derived from the publisher's own
// NATS credential. It is the same on every retry, in every process that
// holds the credential (the replicas of a service, a restarted one), so a
// retried publish is still stored once; nobody without the credential can
// compute it.

// idLabel is what a credential signs to make the key (ed25519 signatures
// are deterministic: the same seed signs it the same way every time). It
// starts with a byte that is never UTF-8, so it can never be a nonce the
// client signs for a server: a nonce comes decoded from the server's
// JSON, always valid UTF-8, so no server, rogue or not, can get the
// label signed and learn the key.
var idLabel = []byte("\xffgantry: the key of this identity's message ids, v1")

// credentialKey derives the message-id key from what nc authenticates
// with: the signature of idLabel by its nkey seed (an nkey or a creds
// file), else its password or token. Nil when it has none of these.
func credentialKey(nc *nats.Conn) []byte {
	if nc == nil {
		return nil
	}
	o := nc.Opts
	var secret []byte
	switch {
	case o.SignatureCB != nil:
		if sig, err := o.SignatureCB(idLabel); err == nil {
			secret = sig
		}
	case o.Password != "":
		secret = []byte(o.User + "\x00" + o.Password)
	case o.Token != "":
		secret = []byte(o.Token)
	default:
		secret = urlPassword(append([]string{o.Url}, o.Servers...))
	}
	if len(secret) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, idLabel)
	m.Write(secret)
	return m.Sum(nil)
}

// urlPassword is the user and password (or token) of the first server
// URL that has one.
func urlPassword(urls []string) []byte {
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil || u.User == nil {
			continue
		}
		pw, _ := u.User.Password()
		return []byte(u.User.Username() + "\x00" + pw)
	}
	return nil
}

// wireID is the Nats-Msg-Id a logical id is published under on subject:
// the logical id, then "~" and the keyed tag. Without a credential key
// (a connection with no credentials, which gantry never configures) it is
// the logical id alone, and the publisher says so once.
func (p *Publisher) wireID(subject, msgID string) string {
	p.keyOnce.Do(func() {
		p.key = credentialKey(p.NC)
		if p.key == nil && p.Log != nil {
			p.Log.Warn("this connection has no credential to key message ids with: another client could store a message under the id of one of ours first; connect with a creds file, an nkey, a password or a token", "security", true)
		}
	})
	return keyedID(p.key, subject, msgID)
}

// keyedID tags msgID with an HMAC of subject and msgID under key.
func keyedID(key []byte, subject, msgID string) string {
	if key == nil {
		return msgID
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(subject))
	m.Write([]byte{0})
	m.Write([]byte(msgID))
	return msgID + "~" + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:18])
}
