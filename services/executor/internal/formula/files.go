package formula

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostfile"
	"github.com/gantry-dev/gantry/pkg/secrets"
)

// A node's files. In a create, the attempt compares them with the host's
// (one script), places those that differ, then runs the node's command
// with $GANTRY_CHANGED naming the paths it changed, one a line. When none
// changed, the node's check and command run as without files, except that
// a node recorded succeeded with the same spec, or one without a command,
// is skipped ("unchanged"). In a check, the files are only compared (and
// diffed when the dispatch asks), and any that differs makes the verdict
// would_change. Their content is read here for each attempt: a source
// from the worker's --files-dir, a secret from its --secrets-dir; one
// that cannot be read fails the attempt before anything starts.

// errFiles: a node's files could not all be read on this worker (a
// source or a secret), so nothing ran. Retrying at once would not help.
var errFiles = errors.New("nothing ran: its files could not be read")

// changedEnv names the paths an attempt's files changed, one a line, in
// the command's environment.
const changedEnv = "GANTRY_CHANGED"

// minMasked is the shortest line of a secret file that is hidden in the
// node's output: a short one ("}", "-----") would hide text everywhere.
const minMasked = 6

// maskedLines are the lines of a secret file that output must hide.
func maskedLines(b []byte) []string {
	var mask []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if l = strings.TrimSuffix(l, "\r"); len(l) >= minMasked {
			mask = append(mask, l)
		}
	}
	return mask
}

// secretFileLines are the lines of the node's secret files that output
// must hide; an error when one cannot be read.
func (nr *nodeRun) secretFileLines() ([]string, error) {
	var mask []string
	var errs []error
	for _, f := range nr.n.Files {
		if f.Kind != events.FileSecret {
			continue
		}
		b, err := nr.x.secrets().Bytes(f.Secret)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.Path, err))
			continue
		}
		mask = append(mask, maskedLines(b)...)
	}
	return mask, errors.Join(errs...)
}

// filesDone is what the file step of an attempt decided: done says the
// attempt ends with state (and permanent) without running its command.
type filesDone struct {
	done      bool
	state     dag.NodeState
	permanent bool
}

// wants reads the node's files on this worker into what hostfile
// places, and the lines of its secret files that its output must hide.
func (sh *shell) wants() ([]hostfile.Want, []string, error) {
	files := sh.nr.n.Files
	out := make([]hostfile.Want, len(files))
	var mask []string
	var errs []error
	for i := range files {
		f := &files[i]
		w := hostfile.Want{Path: f.Path, Owner: f.Owner, Group: f.Group, Mkdir: f.Mkdir}
		if f.Mode != "" {
			m, err := dag.ParseMode(f.Mode)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.Path, err))
				continue
			}
			w.Mode, w.HasMode = m, true
		}
		switch f.Kind {
		case events.FileInline:
			w.Size, w.SHA256, w.Open = hostfile.Bytes(f.Content)
		case events.FileSource:
			c, err := sh.nr.x.sources().Content(f.Source)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.Path, err))
				continue
			}
			w.Size, w.SHA256, w.Open = c.Size, c.SHA256, c.Open
		case events.FileSecret:
			b, err := sh.nr.x.secrets().Bytes(f.Secret)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.Path, err))
				continue
			}
			w.Size, w.SHA256, w.Open = hostfile.Bytes(b)
			w.Secret = true
			mask = append(mask, maskedLines(b)...)
		default:
			errs = append(errs, fmt.Errorf("%s: unknown kind %q", f.Path, f.Kind))
			continue
		}
		out[i] = w
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("%w: %w", errFiles, errors.Join(errs...))
	}
	return out, mask, nil
}

// fileHost is the node's host as hostfile reaches it: as the node's
// commands run (become), the attempt recorded before the first script.
func (sh *shell) fileHost() *hostfile.Host {
	n := sh.nr.n
	return &hostfile.Host{Runner: sh.nr.runner, Become: n.Become, BecomeUser: n.BecomeUser, Timeout: n.Timeout.D(), BeforeStart: sh.record}
}

// compared is the file step's comparison: each file wanted and what the
// host has.
type compared struct {
	host  *hostfile.Host
	wants []hostfile.Want
	found []hostfile.Comparison
}

// compare reads the node's files and compares them with the host's.
func (sh *shell) compare(ctx context.Context) (*compared, error) {
	wants, mask, err := sh.wants()
	if err != nil {
		return nil, err
	}
	sh.mask = mask
	h := sh.fileHost()
	found, err := hostfile.Compare(ctx, h, wants)
	if err != nil {
		return nil, err
	}
	return &compared{host: h, wants: wants, found: found}, nil
}

// result is what the event says of file i: never its content, nor a
// secret's hash.
func (c *compared) result(i int) events.FileResult {
	w := &c.wants[i]
	r := events.FileResult{Path: w.Path, Status: events.FileUnchanged, Differs: c.found[i].Differs}
	if !w.Secret {
		r.SHA256 = w.SHA256
	}
	if c.found[i].Changed() {
		r.Status = events.FileChanged
	}
	return r
}

// placeFiles is the file step of a create: files that differ are placed;
// the event says what each was, and sh.changed what changed since the node
// last succeeded: in this attempt, and in the attempts before it that
// did not succeed (a file one of them placed is in place now, but the
// run that would act on it has not succeeded yet).
func (sh *shell) placeFiles() filesDone {
	ctx, cancel := sh.filesContext()
	defer cancel()
	c, err := sh.compare(ctx)
	if err != nil {
		return sh.filesFailed(err)
	}
	before := sh.changedBefore(c.wants)
	sh.changed = slices.Clone(before)
	defer func() { sh.nr.placed = slices.Clone(sh.changed) }()
	results := make([]events.FileResult, len(c.wants))
	for i := range c.wants {
		results[i] = c.result(i)
		if !c.found[i].Changed() {
			if slices.Contains(before, c.wants[i].Path) {
				results[i].Status = events.FileChanged // by an attempt before, for this run
			}
			continue
		}
		if err := hostfile.Place(ctx, c.host, &c.wants[i], c.found[i]); err != nil {
			results[i].Error = events.BoundError(err.Error())
			sh.ev.Files = results[:i+1]
			return sh.filesFailed(err)
		}
		if !slices.Contains(sh.changed, c.wants[i].Path) {
			sh.changed = append(sh.changed, c.wants[i].Path)
		}
	}
	sh.ev.Files = results
	n := sh.nr.n
	switch {
	case len(sh.changed) > 0 && strings.TrimSpace(n.Command) == "":
		sh.ev.Status = dag.NodeSucceeded
		return filesDone{done: true, state: dag.NodeSucceeded}
	case len(sh.changed) > 0:
		return filesDone{}
	case n.AlreadyDone:
		sh.ev.Status, sh.ev.Reason = dag.NodeSkipped, "already succeeded with the same spec, and its files are in place"
		return filesDone{done: true, state: dag.NodeSkipped}
	case strings.TrimSpace(n.Command) == "":
		sh.ev.Status, sh.ev.Reason = dag.NodeSkipped, "unchanged: its files are in place"
		return filesDone{done: true, state: dag.NodeSkipped}
	}
	return filesDone{}
}

// changedBefore are the paths of wants that attempts of the node changed
// since it last succeeded, as its record keeps them.
func (sh *shell) changedBefore(wants []hostfile.Want) []string {
	var out []string
	for _, p := range sh.nr.rec.Changed {
		if slices.ContainsFunc(wants, func(w hostfile.Want) bool { return w.Path == p }) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// compareFiles is the file step of a check: files are compared (and
// diffed when asked), nothing is written. differ says some would change.
func (sh *shell) compareFiles() (differ bool, fd filesDone) {
	ctx, cancel := sh.filesContext()
	defer cancel()
	c, err := sh.compare(ctx)
	if err != nil {
		return false, sh.filesFailed(err)
	}
	results := make([]events.FileResult, len(c.wants))
	budget := events.MaxFilesDiffBytes
	for i := range c.wants {
		results[i] = c.result(i)
		if !c.found[i].Changed() {
			continue
		}
		differ = true
		if !sh.nr.d.Diff {
			continue
		}
		if budget <= 0 {
			results[i].Diff = "(diff left out: the node's diffs are over " + fmt.Sprint(events.MaxFilesDiffBytes>>10) + " KiB)\n"
			continue
		}
		d, err := hostfile.Diff(ctx, c.host, &c.wants[i], c.found[i], min(events.MaxFileDiffBytes, budget))
		if err != nil {
			results[i].Error = events.BoundError(err.Error())
			sh.ev.Files = results[:i+1]
			return false, sh.filesFailed(err)
		}
		results[i].Diff = sh.masked(d)
		budget -= len(results[i].Diff)
	}
	sh.ev.Files = results
	return differ, filesDone{}
}

// masked hides the node's secrets (its env's and its secret files') in
// text from the host: a file that held a secret before may be diffed.
func (sh *shell) masked(s string) string {
	_, env, _ := secrets.Split(sh.nr.x.secrets(), sh.nr.n.Env)
	for _, v := range env {
		for l := range strings.SplitSeq(v, "\n") {
			if l != "" {
				s = strings.ReplaceAll(s, l, "***")
			}
		}
	}
	for _, l := range sh.mask {
		s = strings.ReplaceAll(s, l, "***")
	}
	return s
}

// filesContext bounds the file step by the node's timeout.
func (sh *shell) filesContext() (context.Context, context.CancelFunc) {
	if t := sh.nr.n.Timeout.D(); t > 0 {
		return context.WithTimeout(sh.nr.stop, t)
	}
	return context.WithCancel(sh.nr.stop)
}

// filesFailed fills the event of a file step that failed: cancelled when
// the formula was, failed otherwise (permanently when retrying cannot
// help).
func (sh *shell) filesFailed(err error) filesDone {
	if errors.Is(err, hostexec.ErrDraining) && sh.drained == nil {
		sh.drained = err
	}
	ev := sh.ev
	ev.Error = events.BoundError("files: " + err.Error())
	if errors.Is(err, hostexec.ErrCancelled) && sh.nr.stop.Err() != nil {
		ev.Status, ev.Reason = dag.NodeCancelled, sh.nr.cancelWhy()+": "+killedReason(err)
		if sh.nr.pastDeadline() {
			ev.Reason += ": " + sh.nr.deadline()
		}
		return filesDone{done: true, state: dag.NodeCancelled, permanent: true}
	}
	ev.Status = dag.NodeFailed
	return filesDone{done: true, state: dag.NodeFailed, permanent: errors.Is(err, errFiles) || isPermanent(err)}
}

// changedList is $GANTRY_CHANGED: the paths the attempt changed, one a
// line.
func (sh *shell) changedList() string { return strings.Join(sh.changed, "\n") }
