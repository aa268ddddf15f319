package dag

// Normalize fills in every default of a valid composition, in place, so that
// the result says explicitly what will run: operation create, on_failure
// stop, the retry policy, transport ssh and port 22, max_parallel 1, each
// dependency's condition (healthy when the prerequisite has a health gate,
// else completed), each node's timeout, and each node's depends_on (the
// previous node when the formula runs one node at a time and none is given),
// and, where commands become, become and become_user on each formula and
// node (see become.go). Normalize is idempotent. Call it only on a composition Validate accepts.
func Normalize(c *Composition) {
	if c.Operation == "" {
		c.Operation = OpCreate
	}
	if c.OnFailure == "" {
		c.OnFailure = OnFailureStop
	}
	if c.Retry == nil {
		r := DefaultRetry
		c.Retry = &r
	}
	normalizeRetry(c.Retry, DefaultRetry)
	if c.Hosts == nil {
		c.Hosts = map[string]Host{}
	}
	for name, h := range c.Hosts {
		if h.Transport == "" {
			h.Transport = TransportSSH
		}
		if h.Transport == TransportSSH {
			if a, err := hostAddress(h.Address); err == nil {
				h.Address = a
			}
		}
		c.Hosts[name] = h
	}
	gated := make(map[string]bool, len(c.Formulas))
	for _, f := range c.Formulas {
		gated[f.ID] = f.HealthGate != nil
	}
	for i := range c.Formulas {
		f := &c.Formulas[i]
		for j := range f.DependsOn {
			d := &f.DependsOn[j]
			if d.Condition == "" {
				d.Condition = ConditionCompleted
				if gated[d.Formula] {
					d.Condition = ConditionHealthy
				}
			}
		}
		for j := range f.Nodes {
			n := &f.Nodes[j]
			deps := effectiveNodeDeps(f, j)
			n.DependsOn = append(make([]string, 0, len(deps)), deps...)
			n.dependsOnSet = true
			if n.Timeout == 0 {
				n.Timeout = Duration(DefaultNodeTimeout)
			}
			if n.Retry != nil {
				normalizeRetry(n.Retry, *c.Retry)
			}
		}
		if f.MaxParallel == 0 {
			f.MaxParallel = DefaultMaxParallel
		}
		normalizeBecome(c, f)
	}
}

// normalizeRetry fills the zero fields of r from def.
func normalizeRetry(r *RetryPolicy, def RetryPolicy) {
	if r.MaxAttempts == 0 {
		r.MaxAttempts = def.MaxAttempts
	}
	if r.InitialInterval == 0 {
		r.InitialInterval = def.InitialInterval
	}
	if r.MaxInterval == 0 {
		r.MaxInterval = max(def.MaxInterval, r.InitialInterval)
	}
	if r.Multiplier == 0 {
		r.Multiplier = def.Multiplier
	}
}

// NodeRetry is the retry policy a node follows: its own, else the
// composition's. The composition must be normalized.
func (c *Composition) NodeRetry(n *Node) RetryPolicy {
	if n.Retry != nil {
		return *n.Retry
	}
	if c.Retry != nil {
		return *c.Retry
	}
	return DefaultRetry
}
