package slots

import "strings"

// What the external tests (package slots_test, which use slotstest.Memory)
// see of a manager's and a lease's insides.

// KeysWithPrefix are the keys as this manager last saw them (for tests).
func (m *Manager) KeysWithPrefix(prefix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range m.keys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// SameSlots says whether two leases hold the one same set of slots (a
// lingering set lent again).
func SameSlots(a, b *Lease) bool { return a != nil && b != nil && a.set == b.set }

// Die stops a lease's refreshes without giving its slots back, as when
// its holder dies.
func (l *Lease) Die() {
	close(l.set.stop)
	<-l.set.done
}

// Queued is how many attempts wait in m's queue of limit id.
func (m *Manager) Queued(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if q := m.queues[id]; q != nil {
		return len(q.waiters)
	}
	return 0
}
