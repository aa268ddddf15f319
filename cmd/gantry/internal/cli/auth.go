package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

func newAuthCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Make gantry's NATS identities and server configuration, or show their permissions",
	}
	cmd.AddCommand(newAuthInitCmd(), newAuthPermissionsCmd())
	return cmd
}

func newAuthInitCmd() *cobra.Command {
	var dir string
	var anonymousViewer, operatorMode bool
	var output string
	cmd := &cobra.Command{
		Use:   "init --dir DIR",
		Short: "Write an nkey seed per identity and the nats-server accounts configuration",
		Long: `init writes DIR/<identity>.nk (an nkey seed, mode 0600) for the operator,
the viewer and each of the four services, keeping the ones already there, and
DIR/server.conf: the two accounts (GANTRY for the services and streams,
GANTRY_CLIENTS for people) with every user's permissions and the imports that
let people reach what they may. Run nats-server with -c DIR/server.conf, or
include it from your own configuration; give each process its seed with
--nkey (or $NATS_NKEY). DIR/names.json names each identity's public key
(public keys only): give it to the planner (--identity-names, or
$GANTRY_IDENTITY_NAMES) and "submitted by" says "operator", not a key.

With --jwt the server runs in operator mode instead: an operator key and the
two account keys (DIR/signing) sign a user JWT per identity, written with its
seed as DIR/<identity>.creds, to give with --creds (or $NATS_CREDS); the
user's name then shows in audit records. nats-server has no anonymous users
in operator mode.

It prints each identity with its public key and the file of its seed or
creds, and where server.conf is; -o json (or yaml) prints them as
{"identities": [{"identity", "public_key", "file"}], "server_config"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--dir is required")}
			}
			keys, err := busauth.LoadOrCreate(dir)
			if err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			path, err := keys.WriteServerConfig(busauth.ServerOptions{AnonymousViewer: anonymousViewer, OperatorMode: operatorMode})
			if errors.Is(err, busauth.ErrAnonymousOperatorMode) {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--anonymous-viewer with --jwt: %w", err)}
			}
			if err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			names, err := keys.WriteNames()
			if err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			out := cmd.OutOrStdout()
			res := authInitResult{ServerConfig: path}
			for _, id := range busauth.Identities() {
				pub, _ := keys.Public(id)
				creds, seed := keys.Credentials(id)
				res.Identities = append(res.Identities, authIdentity{Identity: id, PublicKey: pub, File: creds + seed})
			}
			if structured(output) {
				return printAs(out, output, res)
			}
			for _, i := range res.Identities {
				fmt.Fprintf(out, "%-12s %s  %s\n", i.Identity, i.PublicKey, i.File)
			}
			fmt.Fprintf(out, "server configuration: %s\n", path)
			fmt.Fprintf(out, "identity names: %s (the planner's --identity-names: who submitted shows as operator, not a key)\n", names)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "where to write the seeds and server.conf")
	cmd.Flags().BoolVar(&anonymousViewer, "anonymous-viewer", false, "let a client with no credentials in as a viewer (no_auth_user)")
	cmd.Flags().BoolVar(&operatorMode, "jwt", false, "operator mode: user JWTs and creds files instead of nkey users")
	outputFlag(cmd, &output, "text", formatJSON)
	return cmd
}

// authInitResult is what gantry auth init -o json prints.
type authInitResult struct {
	Identities   []authIdentity `json:"identities"`
	ServerConfig string         `json:"server_config"`
}

// authIdentity is one identity auth init wrote: its public key and the
// file of its seed (or creds).
type authIdentity struct {
	Identity  events.Identity `json:"identity"`
	PublicKey string          `json:"public_key"`
	File      string          `json:"file"`
}

func newAuthPermissionsCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "permissions [IDENTITY]",
		Short: "Show what each identity may publish and subscribe to",
		Long: `permissions prints the subject permissions of every identity (or one:
planner, executor, health-gate, state-store, operator, viewer), as gantry dev
and server.conf enforce them; -o json for nsc or your own configuration.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ids := busauth.Identities()
			if len(args) == 1 {
				id := events.Identity(args[0])
				if !slices.Contains(ids, id) {
					return &exitError{code: ExitUsage, err: fmt.Errorf("unknown identity %q: one of %s", args[0], joinIDs(ids))}
				}
				ids = []events.Identity{id}
			}
			out := cmd.OutOrStdout()
			if structured(output) {
				m := map[events.Identity]any{}
				for _, id := range ids {
					m[id] = struct {
						Account string `json:"account"`
						events.Permissions
					}{id.Account(), events.PermissionsFor(id)}
				}
				if output == formatYAML {
					return printAs(out, output, m)
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				return enc.Encode(m)
			}
			if output != "" && output != "text" {
				return &exitError{code: ExitUsage, err: fmt.Errorf("-o %q: want text or json", output)}
			}
			for _, id := range ids {
				p := events.PermissionsFor(id)
				fmt.Fprintf(out, "%s (account %s)\n", id, id.Account())
				fmt.Fprintf(out, "  publish:   %s\n", strings.Join(p.PublishAllow, " "))
				if len(p.PublishDeny) > 0 {
					fmt.Fprintf(out, "  never:     %s\n", strings.Join(p.PublishDeny, " "))
				}
				fmt.Fprintf(out, "  subscribe: %s\n", strings.Join(p.SubscribeAllow, " "))
				if p.Respond {
					fmt.Fprintln(out, "  answers requests")
				}
			}
			return nil
		},
	}
	outputFlag(cmd, &output, "text", "json")
	return cmd
}

func joinIDs(ids []events.Identity) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, ", ")
}
