package dag

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/pkg/template"
)

// Files a node places on its host (`files:`). Each has an absolute path
// and exactly one source of content: content (the text as written),
// template (a text/template rendered per host when the composition is
// loaded, as commands are), source (a file under the worker's
// --files-dir, which never travels on the bus) or secret (a file of the
// worker's --secrets-dir, which never leaves the worker but to the host).
// The executor writes a file only when its content, mode or owner differ
// (see pkg/hostfile), atomically, and the node's run command starts once
// they are in place.

// File is one file a node places on its host.
type File struct {
	Path string `json:"path"`
	// Content and Template: nil when not given (an empty content is an
	// empty file). After Load, Template holds the rendered text.
	Content  *string `json:"content,omitempty"`
	Template *string `json:"template,omitempty"`
	Source   string  `json:"source,omitempty"`
	Secret   string  `json:"secret,omitempty"`
	// Mode is an octal string ("0640"); empty: a new file gets 0644, an
	// existing one keeps its mode.
	Mode string `json:"mode,omitempty"`
	// Owner and Group: names or numeric ids; empty: a new file gets the
	// writing user's, an existing one keeps its own.
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// Mkdir creates the missing parent directories; without it a missing
	// parent fails the node, naming it.
	Mkdir bool `json:"mkdir,omitempty"`
}

// Limits of files.
const (
	// MaxInlineFile bounds the content of one inline file (content, or a
	// template once rendered): dispatches and workflow records carry it.
	// Larger files go under the worker's --files-dir (source).
	MaxInlineFile = template.MaxRendered
	// MaxInlineFiles bounds the inline content of one formula on one host,
	// all its nodes' files together: its dispatch carries them.
	MaxInlineFiles = 512 << 10
	// MaxFilesPerNode bounds how many files one node places.
	MaxFilesPerNode = 64
	// MaxFilePath bounds a file's path.
	MaxFilePath = 4096
)

// Inline reports whether the file's content travels with the composition
// (content or template).
func (f *File) Inline() bool { return f.Content != nil || f.Template != nil }

// Text is an inline file's content: its content, or its template (once
// rendered).
func (f *File) Text() string {
	switch {
	case f.Content != nil:
		return *f.Content
	case f.Template != nil:
		return *f.Template
	}
	return ""
}

// Kind names the file's source of content: content, template, source or
// secret ("" when none is given).
func (f *File) Kind() string {
	switch {
	case f.Content != nil:
		return "content"
	case f.Template != nil:
		return "template"
	case f.Source != "":
		return "source"
	case f.Secret != "":
		return "secret"
	}
	return ""
}

// ParseMode reads a file mode written as an octal string: three or four
// octal digits, an optional leading 0 or 0o ("644", "0640", "0o755",
// "4755"), at most 07777.
func ParseMode(s string) (uint32, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
	if t != s && t == "" {
		return 0, fmt.Errorf("mode %q has no digits after 0o", s)
	}
	if strings.Trim(t, "01234567") != "" {
		return 0, fmt.Errorf("mode %q is not octal: want digits 0-7, like \"0640\"", s)
	}
	if len(t) < 3 || len(t) > 5 {
		return 0, fmt.Errorf("mode %q: want an octal string like \"0640\" (three or four octal digits)", s)
	}
	if len(t) == 5 { // 0 + four digits: "04755"
		if t[0] != '0' {
			return 0, fmt.Errorf("mode %q is above 07777", s)
		}
		t = t[1:]
	}
	v, err := strconv.ParseUint(t, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("mode %q is not octal: want digits 0-7, like \"0640\"", s)
	}
	return uint32(v), nil
}

// FilePathProblem says why p cannot be a managed file's path, or "".
func FilePathProblem(p string) string {
	switch {
	case p == "":
		return "path is required"
	case len(p) > MaxFilePath:
		return fmt.Sprintf("path is %d bytes; at most %d", len(p), MaxFilePath)
	case !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Sprintf("path %q holds a control character (a NUL, a line break)", trunc(p, 60))
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("path %q is relative: give an absolute path on the host (starting with /)", trunc(p, 60))
	case p == "/" || strings.HasSuffix(p, "/"):
		return fmt.Sprintf("path %q names a directory: give the file's path", trunc(p, 60))
	case path.Clean(p) != p:
		return fmt.Sprintf("path %q is not clean (no '.', '..' or '//' in it): write %q", trunc(p, 60), trunc(path.Clean(p), 60))
	}
	return ""
}

// SourceProblem says why s cannot name a file under the worker's
// --files-dir, or "".
func SourceProblem(s string) string {
	switch {
	case len(s) > MaxFilePath:
		return fmt.Sprintf("source is %d bytes; at most %d", len(s), MaxFilePath)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Sprintf("source %q holds a control character", trunc(s, 60))
	case strings.HasPrefix(s, "/"):
		return fmt.Sprintf("source %q is absolute: give a path relative to the worker's --files-dir", trunc(s, 60))
	case s == "." || s == ".." || strings.HasPrefix(s, "../") || strings.Contains(s, "/../") || strings.HasSuffix(s, "/.."):
		return fmt.Sprintf("source %q leaves the worker's --files-dir ('..'): give a path inside it", trunc(s, 60))
	case path.Clean(s) != s:
		return fmt.Sprintf("source %q is not clean (no '.', '..' or '//' in it): write %q", trunc(s, 60), trunc(path.Clean(s), 60))
	}
	return ""
}

// ownerProblem says why s cannot be a file's owner or group, or "".
func ownerProblem(field, s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 64 {
		return fmt.Sprintf("%s %q is %d characters; at most 64", field, trunc(s, 20), len(s))
	}
	if s[0] == '-' {
		return fmt.Sprintf("%s %q starts with '-': a name starts with a letter, digit or _", field, s)
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.-@$", r)
		if !ok {
			return fmt.Sprintf("%s %q contains %q: a name (or numeric id) has letters, digits, _ . - @ $", field, s, r)
		}
	}
	return ""
}

// files checks a node's files as written: each path (unless a template),
// one source of content, the mode, owner and group, the source's shape,
// the secret's name and an inline content's size.
func (v *validator) files(np func(string) string, n *Node) {
	if len(n.Files) > MaxFilesPerNode {
		v.bad(np(".files"), CodeTooLarge, "%d files; a node places at most %d", len(n.Files), MaxFilesPerNode)
		return
	}
	for i := range n.Files {
		f := &n.Files[i]
		fp := indexPath(np(".files"), i)
		if !strings.Contains(f.Path, "{{") { // a template is checked once rendered
			if prob := FilePathProblem(f.Path); prob != "" {
				v.bad(fp+".path", CodeValue, "%s", prob)
			}
		}
		var given []string
		for _, k := range []struct {
			name string
			set  bool
		}{{"content", f.Content != nil}, {"template", f.Template != nil}, {"source", f.Source != ""}, {"secret", f.Secret != ""}} {
			if k.set {
				given = append(given, k.name)
			}
		}
		switch {
		case len(given) == 0:
			v.bad(fp, CodeRequired, "a file needs one of content, template, source or secret")
		case len(given) > 1:
			v.bad(fp+"."+given[1], CodeValue, "a file has one of content, template, source or secret, not %s", strings.Join(given, " and "))
		}
		if f.Content != nil && len(*f.Content) > MaxInlineFile {
			v.bad(fp+".content", CodeTooLarge, "content is %d bytes, over the %d-byte (%d KiB) limit of an inline file: put the file under the worker's --files-dir and use source", len(*f.Content), MaxInlineFile, MaxInlineFile>>10)
		}
		if f.Source != "" {
			if prob := SourceProblem(f.Source); prob != "" {
				v.bad(fp+".source", CodeValue, "%s", prob)
			}
		}
		if f.Secret != "" {
			if prob := SecretNameProblem(f.Secret); prob != "" {
				v.bad(fp+".secret", CodeValue, "%s", prob)
			}
		}
		if f.Mode != "" {
			if _, err := ParseMode(f.Mode); err != nil {
				v.bad(fp+".mode", CodeValue, "%v", err)
			}
		}
		for _, o := range []struct{ field, val string }{{"owner", f.Owner}, {"group", f.Group}} {
			if prob := ownerProblem(o.field, o.val); prob != "" {
				v.bad(fp+"."+o.field, CodeValue, "%s", prob)
			}
		}
	}
}

// renderFiles renders a node's file templates and paths for its host, and
// checks what rendering made: each path, and each template's size.
func renderFiles(n *Node, np string, r func(*string, string) bool, ps *problems) {
	if n.Files == nil {
		return
	}
	out := make([]File, len(n.Files)) // instances share their formula's list otherwise
	copy(out, n.Files)
	for i := range out {
		f := &out[i]
		fp := indexPath(np+".files", i)
		if strings.Contains(f.Path, "{{") && r(&f.Path, fp+".path") {
			if prob := FilePathProblem(f.Path); prob != "" {
				ps.add(fp+".path", 0, CodeValue, "%s (rendered from a template)", prob)
			}
		}
		if f.Template != nil {
			t := *f.Template
			if r(&t, fp+".template") {
				f.Template = &t
			}
		}
	}
	n.Files = out
}

// checkFiles checks the files of the formulas of one host, once they are
// rendered: no path managed twice on one host, and the inline content of
// each formula within MaxInlineFiles. at gives each formula's path in the
// composition as written.
func checkFiles(c *Composition, at []string, ps *problems) {
	type owner struct{ path, formula string }
	seen := map[string]owner{} // host + "\x00" + path
	for i := range c.Formulas {
		f := &c.Formulas[i]
		inline := 0
		for j := range f.Nodes {
			for k := range f.Nodes[j].Files {
				file := &f.Nodes[j].Files[k]
				fp := indexPath(indexPath(at[i]+".nodes", j)+".files", k)
				inline += len(file.Text())
				key := f.Server + "\x00" + file.Path
				if first, dup := seen[key]; dup {
					ps.add(fp+".path", 0, CodeDuplicate, "%s is managed twice on host %s (also %s, formula %s): one node places a file", file.Path, f.Server, first.path, first.formula)
					continue
				}
				seen[key] = owner{fp + ".path", f.ID}
			}
		}
		if inline > MaxInlineFiles {
			ps.add(at[i], 0, CodeTooLarge, "the inline files (content, template) of formula %s on host %s come to %d bytes, over the %d-byte (%d KiB) limit: put large files under the worker's --files-dir and use source", f.ID, f.Server, inline, MaxInlineFiles, MaxInlineFiles>>10)
		}
	}
}

// fileHash adds a node's files to its spec hash: what each is (path,
// where its content comes from, mode, owner, group, mkdir), an inline
// content by its SHA-256.
func fileHash(field func(string), files []File) {
	field("files")
	field(strconv.Itoa(len(files)))
	for i := range files {
		f := &files[i]
		field(f.Path)
		field(f.Kind())
		switch {
		case f.Inline():
			sum := sha256.Sum256([]byte(f.Text()))
			field(hex.EncodeToString(sum[:]))
		case f.Source != "":
			field(f.Source)
		default:
			field(f.Secret)
		}
		field(f.Mode)
		field(f.Owner)
		field(f.Group)
		field(strconv.FormatBool(f.Mkdir))
	}
}
