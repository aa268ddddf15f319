// Package buildinfo is the version of this build of gantry: one string
// for every service (what `nats micro ls` shows) and for the CLI.
package buildinfo

import (
	"regexp"
	"runtime/debug"
	"strings"
)

// version is set at link time:
//
//	go build -ldflags "-X github.com/gantry-dev/gantry/pkg/buildinfo.version=1.2.0"
//
// It must be a semantic version (a leading "v" is dropped); anything else
// is ignored and the default below is used.
var version string

// Dev is the version of a build that says nothing better.
const Dev = "0.1.0-dev"

// semver is the semantic version grammar (semver.org), as NATS micro
// checks it.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// Version is this build's semantic version: the one set at link time;
// else the main module's version (`go install ...@v1.2.0`, or the one Go
// stamps from the VCS); else Dev with the VCS revision as build metadata
// (0.1.0-dev+1a2b3c4d5e6f, with .dirty for uncommitted changes).
func Version() string {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, bi)
}

// IsSemver says whether v is a semantic version.
func IsSemver(v string) bool { return semver.MatchString(v) }

func resolve(linked string, bi *debug.BuildInfo) string {
	if v := strings.TrimPrefix(linked, "v"); IsSemver(v) {
		return v
	}
	if bi == nil {
		return Dev
	}
	if v := strings.TrimPrefix(bi.Main.Version, "v"); IsSemver(v) {
		return v
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "":
		return Dev
	case dirty:
		return Dev + "+" + rev + ".dirty"
	}
	return Dev + "+" + rev
}

// Commit is the VCS commit this build was made from, "-dirty" after it
// for uncommitted changes, or "unknown" for a build without version
// control information.
func Commit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return commitOf(bi)
}

func commitOf(bi *debug.BuildInfo) string {
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "-dirty"
	}
	return rev
}
