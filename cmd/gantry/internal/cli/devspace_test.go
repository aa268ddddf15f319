package cli

import (
	"errors"
	"strings"
	"testing"
)

// gantry dev refuses to start on a file system with less free space than
// its streams reserve, naming the need and what is there, instead of
// accepting work and stopping in the middle of a run.
func TestDevRefusesTooLittleSpace(t *testing.T) {
	cases := []struct {
		name string
		free uint64
		err  error
		want string // "" starts
	}{
		{"plenty", 10 << 30, nil, ""},
		{"exactly enough", devStoreNeed, nil, ""},
		{"1.2 GiB", 1288 << 20, nil, "gantry dev needs 1.7 GiB free in /data for JetStream (the output-line stream reserves 1.0 GiB, plus 256 MiB to work in, and JetStream takes at most 3/4 of what is free): 1.3 GiB free"},
		{"cannot tell", 0, errors.New("no such file"), "free space in /data: no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkStoreSpace("/data", func(string) (uint64, error) { return c.free, c.err })
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	if n, err := freeSpace(t.TempDir()); err != nil || n == 0 {
		t.Fatalf("free space of a temporary directory: %d %v", n, err)
	}
}
