// Command dist makes gantry's Linux packages (.deb, .rpm) with nfpm from
// packaging/nfpm.yaml and the binaries of one architecture:
//
//	dist -version 1.2.0 -arch amd64 -bin dist/linux_amd64 -out dist
//
// It prints the path of each package it wrote. make dist runs it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb"
	_ "github.com/goreleaser/nfpm/v2/rpm"
)

// options are what one run packages.
type options struct {
	Config  string   // nfpm.yaml
	Repo    string   // the checkout: the config's relative paths start there
	Version string   // a semantic version: ${VERSION}
	Arch    string   // GOARCH: ${ARCH}
	BinDir  string   // the binaries: ${BIN_DIR}
	OutDir  string   // where the packages go
	Formats []string // deb, rpm
}

func main() {
	var o options
	var formats string
	flag.StringVar(&o.Config, "config", "packaging/nfpm.yaml", "nfpm configuration")
	flag.StringVar(&o.Repo, "repo", ".", "the checkout, where the configuration's relative paths start")
	flag.StringVar(&o.Version, "version", "", "package version, a semantic version (${VERSION})")
	flag.StringVar(&o.Arch, "arch", "amd64", "GOARCH of the binaries (${ARCH})")
	flag.StringVar(&o.BinDir, "bin", "", "folder with the binaries (${BIN_DIR})")
	flag.StringVar(&o.OutDir, "out", "dist", "folder the packages are written to")
	flag.StringVar(&formats, "formats", "deb,rpm", "package formats, comma-separated")
	flag.Parse()
	o.Formats = strings.Split(formats, ",")
	paths, err := build(o)
	for _, p := range paths {
		fmt.Println(p)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

// build writes one package per format and returns their paths.
func build(o options) ([]string, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	cfg, err := nfpm.ParseFileWithEnvMapping(o.Config, o.mapping())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Config, err)
	}
	fromRepo(&cfg, o.Repo)
	var paths []string
	for _, format := range o.Formats {
		p, err := write(&cfg, format, o.OutDir)
		if err != nil {
			return paths, fmt.Errorf("%s package: %w", format, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func (o options) check() error {
	var errs []error
	if o.Version == "" {
		errs = append(errs, errors.New("-version is required"))
	}
	if o.BinDir == "" {
		errs = append(errs, errors.New("-bin is required"))
	}
	if o.Arch != "amd64" && o.Arch != "arm64" {
		errs = append(errs, fmt.Errorf("-arch %q: gantry is packaged for amd64 and arm64", o.Arch))
	}
	return errors.Join(errs...)
}

// mapping resolves the config's ${NAME}s: only the three of options, so a
// typo in the config is an empty value that nfpm reports, never a
// variable taken from the environment by chance.
func (o options) mapping() func(string) string {
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	vars := map[string]string{
		"VERSION": strings.TrimPrefix(o.Version, "v"),
		"ARCH":    o.Arch,
		"BIN_DIR": abs(o.BinDir),
	}
	return func(name string) string { return vars[name] }
}

// fromRepo makes the config's relative paths (files and scripts) start at
// repo rather than at the working directory.
func fromRepo(cfg *nfpm.Config, repo string) {
	at := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(repo, *p)
		}
	}
	for _, c := range cfg.Contents {
		at(&c.Source)
	}
	s := &cfg.Scripts
	for _, p := range []*string{&s.PreInstall, &s.PostInstall, &s.PreRemove, &s.PostRemove} {
		at(p)
	}
}

// write makes the package of one format in dir, named as the format's
// convention has it (gantry_1.2.0_amd64.deb, gantry-1.2.0-1.x86_64.rpm).
func write(cfg *nfpm.Config, format, dir string) (string, error) {
	info, err := cfg.Get(format)
	if err != nil {
		return "", err
	}
	info = nfpm.WithDefaults(info)
	pkg, err := nfpm.Get(format)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, pkg.ConventionalFileName(info))
	info.Target = path
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := pkg.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	return path, closeOrRemove(f, path)
}

func closeOrRemove(f io.Closer, path string) error {
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}
