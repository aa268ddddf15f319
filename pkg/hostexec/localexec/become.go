package localexec

import (
	"fmt"

	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// becomeLocal refuses become on transport local.
func becomeLocal(cmd hostexec.Command) error {
	if !cmd.Become {
		return nil
	}
	return fmt.Errorf("%w: transport local runs commands as the worker's own user: become (sudo) is for ssh hosts", hostexec.ErrBecome)
}
