package composition

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// What an inventory path makes gantry read, as `ansible-inventory -i PATH`
// does: a file; or a directory, whose files are read in name order
// (subdirectories too), skipping hidden files, group_vars, host_vars and
// vars_plugins, and the extensions Ansible skips (.ini among them); then
// the group_vars/ and host_vars/ beside the inventory (in the directory
// itself, or the file's).

// Bounds on what one inventory path may make gantry read.
const (
	maxInventoryFiles = 10000
	maxInventoryBytes = 64 << 20
	maxInventoryDepth = 16 // directories within directories
)

// ignoredExts are the extensions Ansible skips in an inventory directory
// (its INVENTORY_IGNORE_EXTS).
var ignoredExts = []string{".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".ini", ".cfg", ".retry"}

// varsExts are the extensions of group_vars and host_vars files.
var varsExts = []string{"", ".yml", ".yaml", ".json"}

// readTop reads the inventory at path, a directory or a file, then the
// group_vars/ and host_vars/ beside it.
func (r *invReader) readTop(path string, dir bool) {
	base := filepath.Dir(path)
	if dir {
		base = path
		r.readDir(path, 0)
	} else {
		r.readSourceFile(path)
	}
	r.readVarsDirs(base)
}

func skippedInDir(name string) bool {
	if strings.HasPrefix(name, ".") || name == "group_vars" || name == "host_vars" || name == "vars_plugins" {
		return true
	}
	return slices.ContainsFunc(ignoredExts, func(ext string) bool { return strings.HasSuffix(name, ext) })
}

func (r *invReader) readDir(dir string, depth int) {
	at := source{file: dir}
	if depth > maxInventoryDepth {
		r.fail(at, dag.CodeTooLarge, "directories nested more than %d deep in the inventory", maxInventoryDepth)
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		r.fail(at, dag.CodeValue, "read inventory: %v", err)
		return
	}
	for _, e := range entries {
		if skippedInDir(e.Name()) {
			continue
		}
		full := filepath.Join(dir, e.Name())
		fi, err := os.Stat(full) // through symbolic links
		switch {
		case err != nil:
			r.fail(source{file: full}, dag.CodeValue, "read inventory: %v", err)
		case fi.IsDir():
			r.readDir(full, depth+1)
		default:
			r.readSourceFile(full)
		}
	}
}

// readFile reads a file within the bounds on files and bytes.
func (r *invReader) readFile(path, what string) ([]byte, bool) {
	at := source{file: path}
	if r.files++; r.files > maxInventoryFiles {
		if r.files == maxInventoryFiles+1 {
			r.fail(at, dag.CodeTooLarge, "more than %d files in the inventory", maxInventoryFiles)
		}
		return nil, false
	}
	data, err := readBounded(path, what)
	if err != nil {
		r.fail(at, dag.CodeValue, "%v", err)
		return nil, false
	}
	if r.bytes += len(data); r.bytes > maxInventoryBytes {
		r.fail(at, dag.CodeTooLarge, "the inventory's files come to more than %d bytes", maxInventoryBytes)
		return nil, false
	}
	if err := dag.CheckSize(data, 0); err != nil {
		r.addProblems(path, err)
		return nil, false
	}
	return data, true
}

func (r *invReader) readSourceFile(path string) {
	if data, ok := r.readFile(path, "inventory"); ok {
		r.readSource(path, data)
	}
}

// addProblems adds the problems of err, in file.
func (r *invReader) addProblems(file string, err error) {
	var bad *dag.InvalidError
	if !errors.As(err, &bad) {
		r.fail(source{file: file}, dag.CodeValue, "%v", err)
		return
	}
	for _, p := range bad.Problems {
		if p.File == "" {
			p.File = file
		}
		r.problems = append(r.problems, p)
	}
}

// inventoryFormat is what an inventory file holds.
type inventoryFormat uint8

const (
	formatINI inventoryFormat = iota
	formatYAMLInv
	formatJSONInv
)

// yamlKeyLine is a first line that only YAML has: a key and a colon at
// its end or before a space ("all:", "web: {hosts: ...}"), a list item,
// or a document start.
var yamlKeyLine = regexp.MustCompile(`^(?:---|%|-(?:\s|$)|[^\s=#;\[][^=#]*?:(?:\s|$))`)

// detectInventory tells the format from the first line that is not blank
// or a comment: { starts JSON, [ (a section) or a host line INI, a key
// and a colon YAML.
func detectInventory(data []byte) inventoryFormat {
	for _, line := range splitLines(strings.TrimPrefix(string(data), "\ufeff")) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '{':
			return formatJSONInv
		case yamlKeyLine.MatchString(line):
			return formatYAMLInv
		}
		return formatINI
	}
	return formatYAMLInv
}

// readSource reads one inventory file's content.
func (r *invReader) readSource(name string, data []byte) {
	r.cur = name
	if err := dag.CheckSize(data, 0); err != nil {
		r.addProblems(name, err)
		return
	}
	switch detectInventory(data) {
	case formatINI:
		r.readINI(data)
	case formatJSONInv:
		r.vault = nil
		root, err := dag.ParseJSON(data)
		switch {
		case err == nil && isListJSON(root):
			r.readList(root)
		case err == nil:
			r.readYAML(root)
		default: // a YAML flow mapping ({all: {hosts: ...}}) is not JSON
			r.readYAMLSource(name, data, err)
		}
	default:
		r.readYAMLSource(name, data, nil)
	}
}

// readYAMLSource reads a YAML inventory; when it is not YAML either,
// jsonErr (what JSON said of it) is its problem, when there is one.
func (r *invReader) readYAMLSource(name string, data []byte, jsonErr error) {
	root, vault, warnings, err := parseInventoryYAML(data)
	if err != nil {
		if jsonErr != nil {
			err = jsonErr
		}
		r.addProblems(name, err)
		return
	}
	if root == nil || root.Kind == dag.KindNull {
		r.fail(r.at("", 0), dag.CodeRequired, "the inventory is empty")
		return
	}
	r.vault = vault
	r.addWarnings(name, warnings)
	r.readYAML(root)
}

func (r *invReader) addWarnings(file string, ws []dag.Problem) {
	for _, w := range ws {
		w.File = file
		r.warnings = append(r.warnings, w)
	}
}

// readVarsDirs reads group_vars/ and host_vars/ in base for every group
// and host of the inventory, as Ansible's host_group_vars plugin does.
func (r *invReader) readVarsDirs(base string) {
	for _, kind := range []string{"group_vars", "host_vars"} {
		dir := filepath.Join(base, kind)
		fi, err := os.Stat(dir)
		switch {
		case err != nil:
			continue
		case !fi.IsDir():
			r.warn(source{file: dir}, "%s is not a directory: it is not read", dir)
			continue
		}
		names := r.dirNames(dir)
		if kind == "group_vars" {
			for _, g := range r.groupOrder {
				r.readVarsOf(dir, g, names, r.groups[g].fileVars)
			}
			continue
		}
		for _, h := range r.hostOrder {
			r.readVarsOf(dir, h, names, r.hosts[h].fileVars)
		}
	}
}

// dirNames lists the names in a directory.
func (r *invReader) dirNames(dir string) map[string]bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		r.fail(source{file: dir}, dag.CodeValue, "read inventory: %v", err)
		return nil
	}
	out := make(map[string]bool, len(entries))
	for _, e := range entries {
		out[e.Name()] = true
	}
	return out
}

// readVarsOf reads the variables of the group or host name from dir: the
// first of NAME (a file, or a directory of files), NAME.yml, NAME.yaml
// and NAME.json that there is.
func (r *invReader) readVarsOf(dir, name string, names map[string]bool, dst map[string]invVar) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return
	}
	for _, ext := range varsExts {
		if !names[name+ext] {
			continue
		}
		full := filepath.Join(dir, name+ext)
		fi, err := os.Stat(full)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			for _, f := range r.varsFilesIn(full, 0) {
				r.readVarsFile(f, dst)
			}
		} else {
			r.readVarsFile(full, dst)
		}
		return
	}
}

// varsFilesIn lists the vars files of a directory, in name order, its
// subdirectories' too: files with no extension or .yml, .yaml, .json;
// not hidden ones or backups (~).
func (r *invReader) varsFilesIn(dir string, depth int) []string {
	if depth > maxInventoryDepth {
		r.fail(source{file: dir}, dag.CodeTooLarge, "directories nested more than %d deep in the vars", maxInventoryDepth)
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		r.fail(source{file: dir}, dag.CodeValue, "read inventory: %v", err)
		return nil
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
			continue
		}
		full, ext := filepath.Join(dir, name), filepath.Ext(name)
		fi, err := os.Stat(full)
		switch {
		case err != nil:
		case fi.IsDir() && ext == "":
			out = append(out, r.varsFilesIn(full, depth+1)...)
		case fi.Mode().IsRegular() && slices.Contains(varsExts, ext):
			out = append(out, full)
		}
	}
	return out
}

// vaultHeader starts a file encrypted whole with ansible-vault.
var vaultHeader = []byte("$ANSIBLE_VAULT;")

// readVarsFile merges a group_vars or host_vars file into dst.
func (r *invReader) readVarsFile(path string, dst map[string]invVar) {
	data, ok := r.readFile(path, "vars")
	if !ok {
		return
	}
	r.cur = path
	if bytes.HasPrefix(bytes.TrimSpace(data), vaultHeader) {
		r.warn(r.at("", 1), "the file is encrypted with ansible-vault: gantry does not decrypt it, and reads none of its variables; %s", secretHint("NAME"))
		return
	}
	var root *dag.Value
	var err error
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		r.vault = nil
		root, err = dag.ParseJSON(data)
	} else {
		var warnings []dag.Problem
		root, r.vault, warnings, err = parseInventoryYAML(data)
		r.addWarnings(path, warnings)
	}
	switch {
	case err != nil:
		r.addProblems(path, err)
	case root == nil || root.Kind == dag.KindNull:
	case root.Kind != dag.KindMap:
		r.fail(r.at("", root.Line), dag.CodeType, "a vars file holds a mapping of variables, got %s", root.Kind)
	default:
		r.readVars(dst, root, "")
	}
}
