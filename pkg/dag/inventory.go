package dag

// An inventory (an Ansible YAML inventory file named by `inventory:`) is
// read by the gantry CLI, which replaces it with the hosts and groups it
// holds before a composition is sent (pkg/composition). These are the
// pieces of validation that reading needs.

// inventory rejects a composition that still names its inventory file:
// the planner and the state-store cannot read the submitter's files.
func (v *validator) inventory() {
	if v.c.Inventory != "" {
		v.bad("inventory", CodeValue, "inventory is read by the gantry CLI: submit with gantry submit FILE, which inlines it")
	}
}

// HostProblems reports the problems host name would have as hosts.<name>
// of a composition (its name, transport, address and user), with paths
// under "hosts.<name>". References to other hosts are not checked.
func HostProblems(name string, h Host) []Problem {
	var ps problems
	v := validator{c: &Composition{}, ps: &ps}
	h.Via = "" // a via names another host: checked where all hosts are known
	v.host(keyPath("hosts", name), name, h)
	return ps.list
}

// TokenProblem says why s is not a token (see IsToken), or "" when it is.
func TokenProblem(s string) string {
	if IsToken(s) {
		return ""
	}
	return tokenProblem(s)
}
