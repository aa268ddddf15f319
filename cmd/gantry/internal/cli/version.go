package cli

import (
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/spf13/cobra"
)

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print gantry's version, commit and Go version",
		Long: `version prints the version of this gantry build (the one every service
announces to NATS micro too), the commit it was built from (with "dirty"
when it had uncommitted changes; "unknown" for a build without version
control information) and the Go it was built with. gantry --version prints
the same. -o json (or yaml) prints {"version", "commit", "go", "platform"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if structured(output) {
				return printAs(cmd.OutOrStdout(), output, currentVersion())
			}
			printVersion(cmd.OutOrStdout())
			return nil
		},
	}
	outputFlag(cmd, &output, "text", formatJSON)
	return cmd
}

// versionInfo is what gantry version -o json prints.
type versionInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Go       string `json:"go"`
	Platform string `json:"platform"` // GOOS/GOARCH
}

func currentVersion() versionInfo {
	return versionInfo{Version: buildinfo.Version(), Commit: revision(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// printVersion prints "gantry VERSION", "commit REV" and "go GOVERSION".
func printVersion(w io.Writer) {
	v := currentVersion()
	fmt.Fprintf(w, "gantry %s\ncommit %s\n%s %s\n", v.Version, v.Commit, v.Go, v.Platform)
}

// versionText is what printVersion prints, for gantry --version.
func versionText() string {
	var b strings.Builder
	printVersion(&b)
	return b.String()
}

// revision is the VCS commit the build was made from (buildinfo.Commit).
func revision() string { return buildinfo.Commit() }
