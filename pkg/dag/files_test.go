package dag_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// filesDoc is a composition with one formula on h1 whose node n places
// the files given (a JSON list body).
func filesDoc(files string) string {
	return base(`{"id":"a","server":"h1","nodes":[{"name":"n","files":[` + files + `]}]}`)
}

// Bad files are refused with the path of the field in the composition.
func TestFileValidation(t *testing.T) {
	big := strings.Repeat("x", dag.MaxInlineFile+1)
	cases := []struct {
		name, doc, path, msg string
	}{
		{"relative path", filesDoc(`{"path":"etc/app.conf","content":"x"}`), "formulas[0].nodes[0].files[0].path", `"etc/app.conf" is relative`},
		{"no path", filesDoc(`{"content":"x"}`), "formulas[0].nodes[0].files[0].path", "path is required"},
		{"unclean path", filesDoc(`{"path":"/etc/../app.conf","content":"x"}`), "formulas[0].nodes[0].files[0].path", "not clean"},
		{"directory path", filesDoc(`{"path":"/etc/app/","content":"x"}`), "formulas[0].nodes[0].files[0].path", "names a directory"},
		{"line break in path", filesDoc(`{"path":"/etc/a\nb","content":"x"}`), "formulas[0].nodes[0].files[0].path", "control character"},
		{"no content", filesDoc(`{"path":"/etc/a"}`), "formulas[0].nodes[0].files[0]", "needs one of content, template, source or secret"},
		{"content and template", filesDoc(`{"path":"/etc/a","content":"x","template":"y"}`), "formulas[0].nodes[0].files[0].template", "not content and template"},
		{"source and secret", filesDoc(`{"path":"/etc/a","source":"a.tgz","secret":"k"}`), "formulas[0].nodes[0].files[0].secret", "not source and secret"},
		{"source escapes", filesDoc(`{"path":"/etc/a","content":"x"},{"path":"/etc/b","source":"../../etc/shadow"}`), "formulas[0].nodes[0].files[1].source", "leaves the worker's --files-dir"},
		{"source absolute", filesDoc(`{"path":"/etc/a","source":"/etc/shadow"}`), "formulas[0].nodes[0].files[0].source", "is absolute"},
		{"bad secret name", filesDoc(`{"path":"/etc/a","secret":"../k"}`), "formulas[0].nodes[0].files[0].secret", "not a secret name"},
		{"bad mode digits", filesDoc(`{"path":"/etc/a","content":"x","mode":"0698"}`), "formulas[0].nodes[0].files[0].mode", "not octal"},
		{"mode too long", filesDoc(`{"path":"/etc/a","content":"x","mode":"107777"}`), "formulas[0].nodes[0].files[0].mode", `want an octal string like "0640"`},
		{"mode a number", filesDoc(`{"path":"/etc/a","content":"x","mode":640}`), "formulas[0].nodes[0].files[0].mode", "quoted octal string"},
		{"bad owner", filesDoc(`{"path":"/etc/a","content":"x","owner":"a b"}`), "formulas[0].nodes[0].files[0].owner", "contains ' '"},
		{"unknown field", filesDoc(`{"path":"/etc/a","content":"x","mdoe":"0644"}`), "formulas[0].nodes[0].files[0].mdoe", `did you mean "mode"`},
		{"inline over the limit", filesDoc(`{"path":"/etc/a","content":"` + big + `"}`), "formulas[0].nodes[0].files[0].content",
			fmt.Sprintf("content is %d bytes, over the %d-byte (256 KiB) limit", dag.MaxInlineFile+1, dag.MaxInlineFile)},
		{"template over the limit", base(`{"id":"a","server":"h1","nodes":[{"name":"n","files":[{"path":"/etc/a","template":"{{ printf \"%300000s\" \"x\" }}"}]}]}`),
			"formulas[0].nodes[0].files[0].template", "262144 bytes"},
		{"one path twice on a host", base(`{"id":"a","server":"h1","nodes":[{"name":"n","files":[{"path":"/etc/a","content":"x"}]},{"name":"m","files":[{"path":"/etc/a","content":"y"}]}]}`),
			"formulas[0].nodes[1].files[0].path", "/etc/a is managed twice on host h1 (also formulas[0].nodes[0].files[0].path"},
		{"one path twice across formulas", base(`{"id":"a","server":"h1","nodes":[{"name":"n","files":[{"path":"/etc/a","content":"x"}]}]},{"id":"b","server":"h1","nodes":[{"name":"n","files":[{"path":"/etc/a","content":"x"}]}]}`),
			"formulas[1].nodes[0].files[0].path", "managed twice on host h1"},
		{"rendered path relative", `{"name":"t","vars":{"d":"rel"},"hosts":{"h1":{"address":"10.0.0.1"}},"formulas":[{"id":"a","server":"h1","nodes":[{"name":"n","files":[{"path":"{{ .Vars.d }}/a","content":"x"}]}]}]}`,
			"formulas[0].nodes[0].files[0].path", `"rel/a" is relative`},
		{"diff without check", `{"name":"t","diff":true,"hosts":{"h1":{"address":"10.0.0.1"}},"formulas":[` + okFormula + `]}`, "diff", "needs operation: check"},
		{"too many files", filesDoc(strings.TrimSuffix(strings.Repeat(`{"path":"/a","content":""},`, dag.MaxFilesPerNode+1), ",")), "formulas[0].nodes[0].files", "at most 64"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.doc)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, p := range problemsOf(t, err) {
				if p.Path == tc.path && strings.Contains(p.Message, tc.msg) {
					return
				}
			}
			t.Fatalf("want a problem at %s saying %q, got %v", tc.path, tc.msg, err)
		})
	}
}

// A group's file template is rendered per host, its path too, and the
// node needs no run; the spec hash follows the rendered content.
func TestFilesRenderPerHost(t *testing.T) {
	doc := `{"name":"t","hosts":{
		"w1":{"address":"10.0.0.1","labels":{"r":"w"},"vars":{"port":"8081","dir":"/srv/w1"}},
		"w2":{"address":"10.0.0.2","labels":{"r":"w"},"vars":{"port":"8082","dir":"/srv/w2"}}},
		"groups":{"web":{"labels":{"r":"w"}}},
		"formulas":[{"id":"app","group":"web","nodes":[{"name":"conf","files":[
			{"path":"{{ .Vars.dir }}/app.conf","template":"port={{ .Vars.port }}\n","mode":"0640","owner":"app"},
			{"path":"/etc/empty","content":""}]}]}]}`
	c, err := load(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	hashes := map[string]bool{}
	for _, f := range c.Formulas {
		files := f.Nodes[0].Files
		got[files[0].Path] = files[0].Text()
		hashes[dag.SpecHash(&f.Nodes[0])] = true
		if files[1].Content == nil || *files[1].Content != "" {
			t.Errorf("an empty content is kept as given: %+v", files[1])
		}
	}
	want := map[string]string{"/srv/w1/app.conf": "port=8081\n", "/srv/w2/app.conf": "port=8082\n"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rendered files %v, want %v", got, want)
	}
	if len(hashes) != 2 {
		t.Errorf("two hosts rendering different content have %d spec hashes, want 2", len(hashes))
	}
	// The loaded composition goes through JSON (the workflow record) and
	// comes back the same.
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back dag.Composition
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if dag.SpecHash(&back.Formulas[0].Nodes[0]) != dag.SpecHash(&c.Formulas[0].Nodes[0]) {
		t.Error("the spec hash changed through JSON")
	}
}

// A node's spec hash changes with each part of a file, and a node
// without files hashes as before files existed.
func TestFileSpecHash(t *testing.T) {
	plain := dag.Node{Name: "n", Run: "true"}
	before := dag.SpecHash(&plain)
	s := func(v string) *string { return &v }
	variants := []dag.File{
		{Path: "/a", Content: s("x")},
		{Path: "/b", Content: s("x")},
		{Path: "/a", Content: s("y")},
		{Path: "/a", Template: s("x")},
		{Path: "/a", Source: "x"},
		{Path: "/a", Secret: "x"},
		{Path: "/a", Content: s("x"), Mode: "0600"},
		{Path: "/a", Content: s("x"), Owner: "app"},
		{Path: "/a", Content: s("x"), Group: "app"},
		{Path: "/a", Content: s("x"), Mkdir: true},
	}
	seen := map[string]int{before: -1}
	for i, f := range variants {
		n := plain
		n.Files = []dag.File{f}
		h := dag.SpecHash(&n)
		if j, dup := seen[h]; dup {
			t.Errorf("variant %d hashes as %d", i, j)
		}
		seen[h] = i
	}
	n := plain
	n.Files = []dag.File{}
	if dag.SpecHash(&n) != before {
		t.Error("an empty files list changed the hash")
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]uint32{"644": 0o644, "0640": 0o640, "0o755": 0o755, "4755": 0o4755, "04755": 0o4755, "0000": 0} {
		got, err := dag.ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %o, %v; want %o", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64", "0o", "888", "17777", "107777", "-644", "0x644", "6 44", "00000000644"} {
		if v, err := dag.ParseMode(in); err == nil {
			t.Errorf("ParseMode(%q) = %o, want an error", in, v)
		}
	}
	// What is wrong is named: a sign or letter is not octal (not "above 07777").
	for in, want := range map[string]string{"-0640": "is not octal", "+644": "is not octal", "0x644": "is not octal", "17777": "is above 07777", "64": "three or four octal digits"} {
		if _, err := dag.ParseMode(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseMode(%q): %v, want %q", in, err, want)
		}
	}
}

// FuzzParseMode: any text is a mode within 07777 or an error, and a mode
// read back from its octal text is the same.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"0644", "644", "0o600", "4755", "04755", "9", "", "0o", "77777"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := dag.ParseMode(s)
		if err != nil {
			return
		}
		if m > 0o7777 {
			t.Fatalf("ParseMode(%q) = %o, above 07777", s, m)
		}
		again, err := dag.ParseMode(fmt.Sprintf("%04o", m))
		if err != nil || again != m {
			t.Fatalf("ParseMode(%04o) = %o, %v; want %o", m, again, err, m)
		}
	})
}
