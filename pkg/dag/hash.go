package dag

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"time"
)

// SpecHash identifies what a node does: its run, check and delete commands,
// its environment and its timeout (the default when none is given). It is
// the same for a node written in YAML or JSON, whatever the key order or
// duration spelling ("10m" and "600s"), and changes when any of those
// change. The state-store records it to decide skip, rerun and drift.
func SpecHash(n *Node) string {
	h := sha256.New()
	var buf [8]byte
	field := func(s string) {
		binary.BigEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	field("gantry.node.v1")
	field(n.Run)
	field(n.Check)
	field(n.Delete)
	timeout := time.Duration(n.Timeout)
	if timeout == 0 {
		timeout = DefaultNodeTimeout
	}
	binary.BigEndian.PutUint64(buf[:], uint64(timeout))
	h.Write(buf[:])
	keys := make([]string, 0, len(n.Env))
	for k := range n.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	binary.BigEndian.PutUint64(buf[:], uint64(len(keys)))
	h.Write(buf[:])
	for _, k := range keys {
		field(k)
		field(n.Env[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
