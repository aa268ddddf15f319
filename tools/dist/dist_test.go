package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// These tests need dpkg-deb, rpm and systemd-analyze (make package-test
// installs them); a missing one fails the test.

var services = []string{"planner", "executor", "health-gate", "state-store"}

// repoRoot is the checkout this module sits in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// fakeBins writes a small script per binary, enough to package.
func fakeBins(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range binaries() {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("#!/bin/sh\necho "+b+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func binaries() []string {
	bins := []string{"gantry"}
	for _, s := range services {
		bins = append(bins, "gantry-"+s)
	}
	return bins
}

// buildPackages makes the .deb and .rpm of arch and returns their paths.
func buildPackages(t *testing.T, arch string) (deb, rpm string) {
	t.Helper()
	root := repoRoot(t)
	paths, err := build(options{
		Config: filepath.Join(root, "packaging/nfpm.yaml"), Repo: root,
		Version: "v1.2.3", Arch: arch, BinDir: fakeBins(t), OutDir: t.TempDir(),
		Formats: []string{"deb", "rpm"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths[0], paths[1]
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func wantAll(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: no %q in:\n%s", what, w, got)
		}
	}
}

// installed is every file the packages put on a machine.
func installed() []string {
	var files []string
	for _, b := range binaries() {
		files = append(files, "/usr/bin/"+b)
	}
	for _, s := range services {
		files = append(files, "/usr/lib/systemd/system/gantry-"+s+".service", "/etc/gantry/"+s+".env")
	}
	return append(files, "/usr/share/doc/gantry/LICENSE", "/usr/share/doc/gantry/README.md")
}

func TestDeb(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			deb, _ := buildPackages(t, arch)
			if base := filepath.Base(deb); base != "gantry_1.2.3_"+arch+".deb" {
				t.Errorf("package file %s, want gantry_1.2.3_%s.deb", base, arch)
			}
			fields := run(t, "dpkg-deb", "-f", deb, "Package", "Version", "Architecture", "Pre-Depends")
			wantAll(t, "dpkg-deb -f", fields, "Package: gantry\n", "Version: 1.2.3\n", "Architecture: "+arch+"\n", "Pre-Depends: passwd\n")
			list := run(t, "dpkg-deb", "-c", deb)
			for _, f := range installed() {
				mode := "-rw-r--r-- root/root"
				if strings.HasPrefix(f, "/usr/bin/") {
					mode = "-rwxr-xr-x root/root"
				}
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(mode) + `\s.*\s\.` + regexp.QuoteMeta(f) + `$`).MatchString(list) {
					t.Errorf("dpkg-deb -c: no %s %s in:\n%s", mode, f, list)
				}
			}
			conffiles := run(t, "dpkg-deb", "-I", deb, "conffiles")
			for _, s := range services {
				wantAll(t, "conffiles", conffiles, "/etc/gantry/"+s+".env\n")
			}
			wantAll(t, "postinst", run(t, "dpkg-deb", "-I", deb, "postinst"), "useradd --system --gid gantry --home-dir /var/lib/gantry")
			wantAll(t, "prerm", run(t, "dpkg-deb", "-I", deb, "prerm"), "systemctl disable --now")
		})
	}
}

func TestRPM(t *testing.T) {
	for arch, rpmArch := range map[string]string{"amd64": "x86_64", "arm64": "aarch64"} {
		t.Run(arch, func(t *testing.T) {
			_, rpm := buildPackages(t, arch)
			if base := filepath.Base(rpm); base != "gantry-1.2.3-1."+rpmArch+".rpm" {
				t.Errorf("package file %s, want gantry-1.2.3-1.%s.rpm", base, rpmArch)
			}
			if got := run(t, "rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{ARCH} %{LICENSE}", rpm); got != "gantry 1.2.3 "+rpmArch+" Apache-2.0" {
				t.Errorf("rpm -qp: %q", got)
			}
			files := strings.Fields(run(t, "rpm", "-qlp", rpm))
			slices.Sort(files)
			want := installed()
			slices.Sort(want)
			if !slices.Equal(files, want) {
				t.Errorf("rpm -qlp:\n%s\nwant:\n%s", strings.Join(files, "\n"), strings.Join(want, "\n"))
			}
			// c: config, n: noreplace (an upgrade keeps the edited file)
			flags := run(t, "rpm", "-qp", "--qf", `[%{FILEFLAGS:fflags} %{FILENAMES}\n]`, rpm)
			for _, s := range services {
				wantAll(t, "file flags", flags, "cn /etc/gantry/"+s+".env\n")
			}
			wantAll(t, "rpm -qp --requires", run(t, "rpm", "-qp", "--requires", rpm), "shadow-utils")
			wantAll(t, "rpm -qp --scripts", run(t, "rpm", "-qp", "--scripts", rpm),
				"postinstall scriptlet", "useradd --system", "preuninstall scriptlet", "postuninstall scriptlet")
		})
	}
}

// TestUnitsVerify runs systemd-analyze verify on the units as the .deb
// installs them: in a root made of the package's files and this machine's
// systemd units, where /usr/bin/gantry-* resolve. A warning fails it too.
func TestUnitsVerify(t *testing.T) {
	deb, _ := buildPackages(t, "amd64")
	root := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, root)
	run(t, "cp", "-rn", "/usr/lib/systemd/system/.", filepath.Join(root, "usr/lib/systemd/system/"))
	args := []string{"verify", "--root=" + root}
	for _, s := range services {
		args = append(args, "gantry-"+s+".service")
	}
	if out := run(t, "systemd-analyze", args...); out != "" {
		t.Errorf("systemd-analyze verify: %s", out)
	}
}

// unit is a unit file's directives, key to values in order.
func unit(t *testing.T, service string) map[string][]string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging/systemd/gantry-"+service+".service"))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for _, line := range strings.Split(string(text), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = append(keys[k], v)
		}
	}
	return keys
}

func TestUnitsRunHardened(t *testing.T) {
	for _, s := range services {
		u := unit(t, s)
		want := map[string]string{
			"User": "gantry", "Group": "gantry", "EnvironmentFile": "/etc/gantry/" + s + ".env",
			"ExecStart": "/usr/bin/gantry-" + s + " $GANTRY_ARGS", "Restart": "on-failure",
			"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
			"StateDirectory": "gantry", "WantedBy": "multi-user.target",
		}
		if s == "executor" {
			want["LimitNOFILE"] = "1048576"
		}
		for k, v := range want {
			if got := u[k]; !slices.Equal(got, []string{v}) {
				t.Errorf("gantry-%s.service: %s=%v, want %s", s, k, got, v)
			}
		}
	}
}

var (
	helpVar = regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`)
	envLine = regexp.MustCompile(`(?m)^#?([A-Z][A-Z0-9_]*)=(.*)$`)
)

// TestEnvFilesNameWhatServicesRead: every variable an env file sets or
// suggests is one the service reads (its --help names it), or GANTRY_ARGS,
// which the unit passes on its command line; a suggested value is one the
// service accepts.
func TestEnvFilesNameWhatServicesRead(t *testing.T) {
	root := repoRoot(t)
	for _, s := range services {
		t.Run(s, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), s)
			goCmd(t, root, "build", "-o", bin, "./services/"+s)
			help, _ := exec.Command(bin, "--help").CombinedOutput()
			reads := map[string]bool{"GANTRY_ARGS": true}
			for _, m := range helpVar.FindAllStringSubmatch(string(help), -1) {
				reads[m[1]] = true
			}
			text, err := os.ReadFile(filepath.Join(root, "packaging/env", s+".env"))
			if err != nil {
				t.Fatal(err)
			}
			lines := envLine.FindAllStringSubmatch(string(text), -1)
			if len(lines) < 5 {
				t.Fatalf("%s.env: only %d variables", s, len(lines))
			}
			for _, m := range lines {
				if !reads[m[1]] {
					t.Errorf("%s.env: %s, which gantry-%s does not read", s, m[1], s)
				}
			}
			checkValues(t, bin, lines)
		})
	}
}

// checkValues starts the service with every suggested GANTRY_* value and
// --help: a value it cannot parse is an error before any help.
func checkValues(t *testing.T, bin string, lines [][]string) {
	t.Helper()
	cmd := exec.Command(bin, "--help")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for _, m := range lines {
		if strings.HasPrefix(m[1], "GANTRY_") && m[1] != "GANTRY_ARGS" {
			cmd.Env = append(cmd.Env, m[1]+"="+m[2])
		}
	}
	out, _ := cmd.CombinedOutput()
	if !bytes.HasPrefix(out, []byte("Usage: ")) {
		t.Errorf("%s --help with the env file's values: %s", filepath.Base(bin), out)
	}
}

// goCmd runs the go command in the gantry module, in its workspace.
func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
