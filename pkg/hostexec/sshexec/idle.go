package sshexec

import (
	"time"
)

// DefaultSSHIdle is how long a pooled connection may stay unused before it
// is closed (--ssh-idle). A fleet's executor would otherwise keep one
// connection, file descriptor and sshd process per host it ever ran on.
const DefaultSSHIdle = 10 * time.Minute

// touch notes that c was just used (a session ended, a dial finished).
func (c *conn) touch() { c.used.Store(time.Now().UnixNano()) }

// reapIdle closes, every quarter of the idle time, the connections that
// ran no session for that long, until done is closed. A jump host's
// connection stays while a connection through it is open.
func (p *Pool) reapIdle(idle time.Duration, done <-chan struct{}) {
	every := max(idle/4, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			p.closeIdle(now.Add(-idle))
		}
	}
}

// closeIdle closes the connections unused since before (none of their
// sessions open, not dialing, no open connection through them).
func (p *Pool) closeIdle(before time.Time) {
	p.mu.Lock()
	conns := make([]*conn, 0, len(p.conns))
	for _, c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	carrying := map[*conn]bool{} // jump hosts with a connection through them
	for _, c := range conns {
		if c.parent == nil {
			continue
		}
		if !c.mu.TryLock() { // dialing, through its jump host
			carrying[c.parent] = true
			continue
		}
		if c.client != nil {
			carrying[c.parent] = true
		}
		c.mu.Unlock()
	}
	for _, c := range conns {
		if c.used.Load() < before.UnixNano() {
			c.closeIdleAgents()
		}
	}
	for _, c := range conns {
		if carrying[c] || !c.mu.TryLock() { // TryLock fails while it dials
			continue
		}
		cl := c.client
		if cl != nil && !c.busy() && c.used.Load() < before.UnixNano() {
			c.client = nil
			p.log.Info("closing an idle SSH connection", "host", c.address, "user", c.user)
			_ = cl.Close()
			c.forgetLimit()
		}
		c.mu.Unlock()
	}
}

// forgetLimit gives the connection's learned session limit up (its
// reserved slots back): the next connection starts from MaxSessions and
// learns sshd's limit again, which may have been raised meanwhile.
func (c *conn) forgetLimit() {
	c.lim.Lock()
	defer c.lim.Unlock()
	for ; c.reserved > 0; c.reserved-- {
		<-c.sem
	}
	c.limit = cap(c.sem)
}

// closeIdleAgents ends c's idle host agents, giving their slots back, and
// says how many it ended.
func (c *conn) closeIdleAgents() (n int) {
	for {
		select {
		case a := <-c.idle:
			a.close()
			c.release()
			n++
		default:
			return n
		}
	}
}
