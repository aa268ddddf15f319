package formula

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/outputs"
)

// Outputs. A node that declares outputs gets $GANTRY_OUTPUT for its run
// (create); once the run succeeded, its file is read back from the host,
// parsed and stored in gantry_outputs before the success is recorded, so
// every node that sees it succeeded finds them. A node whose scripts or
// env read outputs gets them put in when each script starts (the planner
// rendered each read as a marker): a secret one as an environment
// variable the command's output masks.

// errOutputMissing: an output a node reads is not stored. Retrying at
// once would not help; the node fails and names it.
var errOutputMissing = errors.New("nothing ran: an output it reads is missing")

// outputsWait bounds reading and storing outputs.
const outputsWait = 30 * time.Second

// fillOutputs puts the outputs script and env read into them; a secret
// one goes to secret (made when nil).
func (sh *shell) fillOutputs(script string, env, secret map[string]string) (string, map[string]string, map[string]string, error) {
	return sh.nr.fillOutputs(sh.nr.stop, script, env, secret)
}

// fillOutputs is shell.fillOutputs within ctx (a settle's, which starts
// nothing and has no attempt's stop).
func (nr *nodeRun) fillOutputs(ctx context.Context, script string, env, secret map[string]string) (string, map[string]string, map[string]string, error) {
	if !dag.HasOutputs(script) && !readsOutputs(env) {
		return script, env, secret, nil
	}
	if nr.x.Outputs == nil {
		return "", nil, nil, fmt.Errorf("%w: this executor keeps no outputs", errOutputMissing)
	}
	ctx, cancel := context.WithTimeout(ctx, outputsWait)
	defer cancel()
	if secret == nil {
		secret = map[string]string{}
	}
	f := &outputs.Filler{Store: nr.x.Outputs, Workflow: nr.d.Workflow}
	filled, err := f.Script(ctx, script)
	if err == nil {
		env, err = f.Env(ctx, env, secret)
	}
	switch {
	case errors.Is(err, outputs.ErrMissing):
		return "", nil, nil, fmt.Errorf("%w: %w", errOutputMissing, err)
	case err != nil:
		return "", nil, nil, fmt.Errorf("nothing ran: %w", err)
	}
	f.Secrets(env, secret)
	return filled, env, secret, nil
}

func readsOutputs(env map[string]string) bool {
	for _, v := range env {
		if dag.HasOutputs(v) {
			return true
		}
	}
	return false
}

// keepOutputs reads back, parses and stores what the node's succeeded run
// wrote to $GANTRY_OUTPUT, and puts it on the node's event: the values
// but the secret ones, which are masked in its output tails.
func (sh *shell) keepOutputs() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(sh.nr.stop), outputsWait)
	defer cancel()
	return sh.nr.keepOutputs(ctx, sh.cmd, sh.attempt, sh.ev)
}

// keepOutputs reads back, parses and stores what the attempt a (the
// node's attempt number attempt, ended) wrote to $GANTRY_OUTPUT, and puts
// it on ev: the values but the secret ones, which are masked in ev's
// output tails.
func (nr *nodeRun) keepOutputs(ctx context.Context, a hostexec.Attempt, attempt int, ev *events.NodeEvent) error {
	if nr.x.Outputs == nil {
		return errors.New("outputs: this executor keeps no outputs")
	}
	data, err := hostexec.ReadOutput(ctx, nr.runner, a, outputs.MaxFileBytes)
	if err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	values, err := outputs.Parse(data, nr.n.Outputs)
	if err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	rec := outputs.Record(values, nr.n.Outputs, nr.d.Ref, attempt, nr.n.SpecHash)
	if err := outputs.Save(ctx, nr.x.Outputs, events.OutputKey(nr.d.Workflow, nr.d.Formula, nr.n.Name), rec); err != nil {
		return fmt.Errorf("outputs: %w", err)
	}
	ev.Outputs, ev.SecretOutputs = outputs.Public(rec)
	var secrets []string
	for _, k := range ev.SecretOutputs {
		if v := values[k]; v != "" {
			secrets = append(secrets, v)
		}
	}
	ev.StdoutTail, ev.StderrTail = maskTail(ev.StdoutTail, secrets), maskTail(ev.StderrTail, secrets)
	nr.log.Info("outputs stored", "outputs", len(values), "secret", len(ev.SecretOutputs))
	return nil
}

// maskTail masks secrets in an output tail (events.BoundTail of
// MaxTailBytes): each whole copy, and, when the tail was cut (told once,
// before anything is masked), the end of one the cut began inside.
func maskTail(tail string, secrets []string) string {
	if len(tail) > events.MaxTailBytes-utf8.UTFMax {
		tail = maskCutStart(tail, secrets)
	}
	for _, v := range secrets {
		tail = strings.ReplaceAll(tail, v, "***")
	}
	return tail
}

// maskCutStart masks the start of a cut tail where it is the end of a
// secret (the longest such end).
func maskCutStart(tail string, secrets []string) string {
	longest := 0
	for _, v := range secrets {
		for k := len(v) - 1; k > longest; k-- {
			if strings.HasPrefix(tail, v[len(v)-k:]) {
				longest = k
				break
			}
		}
	}
	if longest == 0 {
		return tail
	}
	return "***" + tail[longest:]
}
