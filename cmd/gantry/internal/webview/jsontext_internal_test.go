package webview

import (
	"bytes"
	"encoding/json"
	"testing"
)

// jsonTextLen is what encoding/json writes of a string, quotes aside, with
// HTML escaping off (as the output reply is written).
func TestJSONTextLenIsWhatJSONWrites(t *testing.T) {
	for _, s := range []string{"", "plain", `"quoted" \ back`, "tab\tnl\ncr\r", "\x00\x01\x1f", "<&>", "é ✓ 😀", "\u2028\u2029", "bad \xff\xfe utf-8", string([]byte{0xe2, 0x82})} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if want := b.Len() - 3; jsonTextLen(s) != want { // the quotes and the newline
			t.Errorf("jsonTextLen(%q) = %d, encoding/json writes %d", s, jsonTextLen(s), want)
		}
	}
}
