package dag

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// SpecHash identifies what a node does: its run, check and delete commands,
// its environment (a secret by its name, not its value), its timeout (the
// default when none is given), on a normalized node that becomes, whom
// it becomes (a node that does not hashes as before become existed), its
// files (an inline one by its content's SHA-256, a source or secret by its
// name), and the outputs it declares (a node without hashes as before). It is
// the same for a node written in YAML or JSON, whatever the key order or
// duration spelling ("10m" and "600s"), and changes when any of those
// change. The state-store records it to decide skip, rerun and drift.
func SpecHash(n *Node) string {
	var stack [512]byte
	buf := stack[:0]
	field := func(s string) {
		buf = binary.BigEndian.AppendUint64(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	field("gantry.node.v1")
	field(n.Run)
	field(n.Check)
	field(n.Delete)
	timeout := time.Duration(n.Timeout)
	if timeout == 0 {
		timeout = DefaultNodeTimeout
	}
	buf = binary.BigEndian.AppendUint64(buf, uint64(timeout))
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(n.Env)))
	if len(n.Env) > 0 {
		for _, k := range sortedKeys(n.Env) {
			field(k)
			if e := n.Env[k]; e.IsSecret() {
				// A secret counts by its name, never its value (the
				// planner does not know it): a length no text can have
				// marks it, so {secret: x} and the text "x" differ.
				buf = binary.BigEndian.AppendUint64(buf, secretMark)
				field(e.Secret)
				continue
			}
			field(n.Env[k].Text)
		}
	}
	if b, user := Becomes(n.Become, n.BecomeUser); b {
		field("become")
		field(user)
	}
	if len(n.Files) > 0 { // a node without files hashes as before files existed
		fileHash(field, n.Files)
	}
	if len(n.Outputs) > 0 { // declaring an output runs the node again
		field("outputs")
		for _, o := range n.Outputs {
			field(o.Name)
			field(map[bool]string{true: "secret", false: ""}[o.Secret])
		}
	}
	sum := sha256.Sum256(buf)
	const prefix = "sha256:"
	var out [len(prefix) + 2*sha256.Size]byte
	copy(out[:], prefix)
	hex.Encode(out[len(prefix):], sum[:])
	return string(out[:])
}

// secretMark stands where a text's length would be, before a secret's name.
const secretMark = ^uint64(0)
