package sshexec

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
	"golang.org/x/crypto/ssh"
)

// Become. A command with Become runs on its host through sudo, as root or
// as BecomeUser: every shell gantry starts for it there, not only its
// script, runs as that user: the durable supervisor (or the host agent)
// with the attempt's files, the follow sessions that read them, the kill
// and the settle. So the attempt machinery works as for any login user
// (its files are under that user's home: sudo -H), and a kill ends every
// process of the attempt, whoever owns it, since it runs as their owner.
// Host agents run as one user each: an idle agent of another user gives
// its session up to a new one.
//
// What sshd runs is
//
//	exec sudo -n -H [-u USER] -- /bin/sh -c 'exec setsid -w /bin/sh -c "$1"' gantry TEXT
//
// sudo -n never asks for a password: a host whose sudo wants one fails
// the command at once (ErrBecome). The shell it starts makes a session of
// its own (setsid), so that it leads its process group, as the login
// shell sshd starts does: the group the kill ends. sudo passes stdin on
// untouched (without a terminal it allocates none), so secrets still
// travel there, never in an argv; the command's environment is exported
// by the text itself, after sudo has reset the environment. A host is
// asked once per connection and user whether sudo -n works there, before
// the first such command starts.

// becomeAs is whom a command's shells run as on its host: the login user
// (zero), or another through sudo.
type becomeAs struct {
	on   bool
	user string // sudo -u; "": sudo's default (root)
}

func becomeOf(cmd hostexec.Command) becomeAs {
	if !cmd.Become {
		return becomeAs{}
	}
	return becomeAs{on: true, user: cmd.BecomeUser}
}

// target names the user for people: root when sudo's default.
func (b becomeAs) target() string {
	if b.user == "" {
		return "root"
	}
	return b.user
}

// sudo is the sudo command line up to the program it runs.
func (b becomeAs) sudo() string {
	u := ""
	if b.user != "" {
		u = " -u " + hostsh.Quote(b.user)
	}
	return "sudo -n -H" + u + " -- "
}

// remote is what sshd runs for the shell text: /bin/sh -c text, as the
// login user or through sudo (see above).
func (b becomeAs) remote(text string) string {
	if !b.on {
		return "exec /bin/sh -c " + hostsh.Quote(text)
	}
	return "exec " + b.sudo() + "/bin/sh -c " + hostsh.Quote(`exec setsid -w /bin/sh -c "$1"`) + " gantry " + hostsh.Quote(text)
}

// becomeMarker is what the check that sudo works prints when it does.
const becomeMarker = "__gantry_become"

// becomeCheck is the check, run as the login user.
func (b becomeAs) check() string {
	return `command -v sudo >/dev/null 2>&1 || { echo '__gantry_nosudo'; exit 127; }
` + b.sudo() + `/bin/sh -c 'command -v setsid >/dev/null 2>&1 || { echo "setsid (util-linux) is not installed" >&2; exit 127; }; echo ` + becomeMarker + `'`
}

// checkBecome makes sure sudo -n works on the host for b before the
// first command that needs it on the connection: ErrBecome, saying what
// to do, when it does not. It takes a session slot for the check.
func (r *sshRunner) checkBecome(ctx context.Context, c *conn, b becomeAs) error {
	if !b.on {
		return nil
	}
	client, err := r.pool.client(ctx, c)
	if err != nil {
		return err
	}
	if c.became(b, client) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.pool.cfg.ConnectTimeout)
	defer cancel()
	sess, client, err := r.slotSession(ctx, c, func() (*ssh.Session, *ssh.Client, error) { return r.session(ctx, c) })
	if err != nil {
		return err
	}
	defer func() { c.touch(); c.release() }()
	defer sess.Close()
	var out, errOut bytes.Buffer
	sess.Stdout, sess.Stderr, sess.Stdin = &out, &errOut, eofReader{}
	done := make(chan error, 1)
	go func() { done <- sess.Run("exec /bin/sh -c " + hostsh.Quote(b.check())) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		return fmt.Errorf("%w: sudo -n on %s did not answer within %s", hostexec.ErrBecome, r.address, r.pool.cfg.ConnectTimeout)
	}
	if strings.Contains(out.String(), becomeMarker) {
		c.noteBecame(b, client)
		return nil
	}
	return r.becomeErr(c, b, out.String(), errOut.String(), err)
}

// becomeErr says why the check that sudo works failed on the host.
func (r *sshRunner) becomeErr(c *conn, b becomeAs, out, errOut string, err error) error {
	said := strings.TrimSpace(errOut)
	switch {
	case strings.Contains(out, "__gantry_nosudo"):
		return fmt.Errorf("%w: sudo is not installed on %s: become runs commands through sudo -n", hostexec.ErrBecome, r.address)
	case strings.Contains(said, "password is required"):
		return fmt.Errorf("%w: sudo on %s needs a password for %s; gantry runs sudo -n and never types one: allow NOPASSWD for %s in the host's sudoers (%s ALL=(%s) NOPASSWD: ALL), or log in as a user that needs no become (sudo said: %s)",
			hostexec.ErrBecome, r.address, c.user, c.user, c.user, b.target(), said)
	case said == "" && err != nil:
		said = err.Error()
	}
	return fmt.Errorf("%w: sudo -n on %s does not run commands as %s for %s: %s", hostexec.ErrBecome, r.address, b.target(), c.user, said)
}

// became says whether sudo was found to work for b on the connection
// client.
func (c *conn) became(b becomeAs, client *ssh.Client) bool {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	return c.becameOn[b.user] == client
}

func (c *conn) noteBecame(b becomeAs, client *ssh.Client) {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	if c.becameOn == nil {
		c.becameOn = map[string]*ssh.Client{}
	}
	c.becameOn[b.user] = client
}
