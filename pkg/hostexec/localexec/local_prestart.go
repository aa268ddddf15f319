package localexec

// Prestart. A local durable attempt pays, before its command may start,
// for a new /bin/sh (an exec, the dynamic loader, the shell's own start)
// and for four new files: a chain of local nodes pays that once per link.
// With LocalOptions.Prestart, a Local runner pays both ahead of need,
// between attempts: it keeps warm shells (local_warm.go) and spare files
// (local_spare.go) for the next attempts. Without it, every attempt
// starts its shell and creates its files when it comes; what an attempt
// does and records is the same either way.
//
// The executor and the health-gate turn it on with --local-prestart (on
// by default): see docs/performance.md for what it saves.

// LocalOptions configures a Local runner.
type LocalOptions struct {
	// Prestart keeps warm shells and spare files for the next durable
	// attempts (see above). It costs a few idle shells (their processes)
	// and a dozen open unnamed files per attempts directory.
	Prestart bool
}

// NewLocal returns a Local runner with opts. Each runner made with
// Prestart has its own warm shells and spare files.
func NewLocal(opts LocalOptions) Local {
	if !opts.Prestart {
		return Local{}
	}
	return Local{pre: &prestart{}}
}

// Prestarts says whether l was made with LocalOptions.Prestart.
func (l Local) Prestarts() bool { return l.pre != nil }

// prestart is a Local runner's shells and files made ahead of need. Its
// methods do nothing on a nil prestart (a runner without Prestart).
type prestart struct {
	warm   warmPool
	spares spareSet
}

// takeWarm returns a warm shell started with env, or nil (see
// warmPool.take).
func (p *prestart) takeWarm(env []string, lock bool) *warmShell {
	if p == nil {
		return nil
	}
	return p.warm.take(env, lock)
}

// placeSpare gives a spare file of base the name dst (see spareSet.place);
// false when it placed nothing.
func (p *prestart) placeSpare(base, dst string) (bool, error) {
	if p == nil {
		return false, nil
	}
	return p.spares.place(base, dst)
}

// replenish makes warm shells and spare files for the next attempts, in
// the background.
func (p *prestart) replenish(base string) {
	if p == nil {
		return
	}
	p.warm.refill(localEnv(nil))
	p.spares.refill(base)
}
