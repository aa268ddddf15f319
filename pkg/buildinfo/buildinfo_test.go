package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(main string, kv ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Version: main}}
		for i := 0; i+1 < len(kv); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return bi
	}
	for _, c := range []struct {
		name, linked string
		bi           *debug.BuildInfo
		want         string
	}{
		{"linked wins", "v1.4.2", vcs("v0.9.0"), "1.4.2"},
		{"linked not semver is ignored", "nightly", vcs("(devel)"), Dev},
		{"module version", "", vcs("v1.2.3"), "1.2.3"},
		{"stamped pseudo-version", "", vcs("v0.0.0-20261123094424-efde316abcde+dirty"), "0.0.0-20261123094424-efde316abcde+dirty"},
		{"devel with revision", "", vcs("(devel)", "vcs.revision", "efde3161234567890abc", "vcs.modified", "false"), Dev + "+efde31612345"},
		{"dirty", "", vcs("(devel)", "vcs.revision", "efde316", "vcs.modified", "true"), Dev + "+efde316.dirty"},
		{"no build info", "", nil, Dev},
		{"nothing known", "", vcs("(devel)"), Dev},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := resolve(c.linked, c.bi)
			if got != c.want {
				t.Fatalf("resolve = %q, want %q", got, c.want)
			}
			if !IsSemver(got) {
				t.Fatalf("%q is not a semantic version", got)
			}
		})
	}
}

func TestVersionIsSemver(t *testing.T) {
	if v := Version(); !IsSemver(v) {
		t.Fatalf("Version() = %q: not a semantic version (NATS micro refuses it)", v)
	}
}

func TestCommitOf(t *testing.T) {
	bi := func(kv ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{}
		for i := 0; i+1 < len(kv); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return b
	}
	for _, c := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{bi(), "unknown"},
		{bi("vcs.revision", "abc123", "vcs.modified", "false"), "abc123"},
		{bi("vcs.revision", "abc123", "vcs.modified", "true"), "abc123-dirty"},
	} {
		if got := commitOf(c.bi); got != c.want {
			t.Errorf("commitOf(%v) = %q, want %q", c.bi.Settings, got, c.want)
		}
	}
}
