package outputs

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

var declared = []dag.Output{{Name: "join_cmd"}, {Name: "token", Secret: true}, {Name: "ca"}}

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		file string
		want map[string]string
	}{
		{"empty", "", map[string]string{}},
		{"one line", "join_cmd=kubeadm join 10.0.0.1:6443 --token x\n", map[string]string{"join_cmd": "kubeadm join 10.0.0.1:6443 --token x"}},
		{"no newline at the end", "token=abc", map[string]string{"token": "abc"}},
		{"value with = and <<", "token=a=b<<c\n", map[string]string{"token": "a=b<<c"}},
		{"empty value", "token=\n", map[string]string{"token": ""}},
		{"blank lines and CRLF", "\n\r\njoin_cmd=x\r\n\ntoken=y\r\n", map[string]string{"join_cmd": "x", "token": "y"}},
		{"last one wins", "token=a\ntoken=b\n", map[string]string{"token": "b"}},
		{"multi-line", "ca<<EOF\n-----BEGIN-----\nMIIB\n-----END-----\nEOF\njoin_cmd=j\n", map[string]string{"ca": "-----BEGIN-----\nMIIB\n-----END-----", "join_cmd": "j"}},
		{"multi-line, any delimiter, blank lines kept", "ca<<ghadelimiter_123\n\nx\n\nghadelimiter_123\n", map[string]string{"ca": "\nx\n"}},
		{"multi-line empty", "ca<<E\nE\n", map[string]string{"ca": ""}},
		{"multi-line delimiter needs the whole line", "ca<<E\nE \nEnd\nE\n", map[string]string{"ca": "E \nEnd"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.file), declared)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	cases := []struct {
		name string
		file string
		is   error
		msg  string
	}{
		{"undeclared name", "join_cmd=x\njoin_command=y\n", ErrUndeclared, `line 2 (its name is not quoted: the line may hold a secret; the node declares join_cmd, token, ca)`},
		{"undeclared multi-line", "\nkey<<EOF\nx\nEOF\n", ErrUndeclared, `line 2 (its name is not quoted`},
		{"a value without its name (base64, '=' padded)", "s3cr3tc3VwZXJzZWNyZXQ==\n", ErrUndeclared, "line 1 (its name is not quoted"},
		{"a value without its name, a '<<' in it", "s3cr3t<<x\n", ErrMalformed, "line 1: the multi-line value is not closed"},
		{"a delimiter is not quoted", "token<<s3cr3t\nx\n", ErrMalformed, "line 1: the multi-line value is not closed by a line holding its delimiter (not quoted"},
		{"no = nor <<", "join_cmd=x\n\njust text\n", ErrMalformed, "line 3: expected name=value or name<<DELIMITER"},
		{"a line is never quoted", "s3cr3t-token-value\n", ErrMalformed, "line 1: expected"},
		{"not a name before =", "tok en=x\n", ErrMalformed, "line 1: what comes before its '=' or '<<' is not an output name"},
		{"empty name", "=x\n", ErrMalformed, "line 1: expected name=value"},
		{"unclosed", "token=x\nca<<EOF\nabc\n", ErrMalformed, `line 2: the multi-line value is not closed by a line holding its delimiter`},
		{"no delimiter", "ca<<\nx\n", ErrMalformed, "line 1: a multi-line value needs a delimiter"},
		{"NUL", "token=a\x00b\n", ErrMalformed, "line 1: the value of token holds a NUL byte"},
		{"carriage return inside", "token=a\rb\n", ErrMalformed, "line 1: the value of token holds a carriage return"},
		{"not UTF-8", "join_cmd=\xff\n", ErrMalformed, "line 1: the value of join_cmd is not UTF-8"},
		{"too large", "ca=" + strings.Repeat("x", MaxFileBytes) + "\n", ErrTooLarge, "larger than 64 KiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file), declared)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v with %q", err, tc.is, tc.msg)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error quotes the file's text: %v", err)
			}
		})
	}
}

func TestFormatParsesBack(t *testing.T) {
	v := map[string]string{"join_cmd": "kubeadm join a=b", "token": "x\ny", "ca": "EOF\nEOF_\nz"}
	got, err := Parse(Format(v), declared)
	if err != nil || !maps.Equal(got, v) {
		t.Fatalf("got %q, %v; want %q", got, err, v)
	}
}

// FuzzParse: no file makes Parse panic; what it accepts names declared
// outputs only, with UTF-8 values without NUL, and written again by
// Format it reads back the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "join_cmd=x\n", "ca<<EOF\na\nb\nEOF\n", "token=a\r\n\nca<<E\r\nE\r\n", "ca<<EOF\nno end", "=x", "x<<", "token=\x00", "ca<<<<\n<<\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Parse(data, declared)
		if err != nil {
			return
		}
		for k, v := range got {
			if k != "join_cmd" && k != "token" && k != "ca" {
				t.Fatalf("undeclared name %q accepted", k)
			}
			if strings.IndexByte(v, 0) >= 0 {
				t.Fatalf("value of %s holds NUL", k)
			}
		}
		again, err := Parse(Format(got), declared)
		if err != nil {
			t.Fatalf("Format of %q does not parse: %v", got, err)
		}
		if !maps.Equal(again, got) {
			t.Fatalf("round trip: %q became %q", got, again)
		}
	})
}
