package eventbus

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// The label a credential signs to key message ids can never be a nonce a
// server has the client sign: nonces come from JSON, always valid UTF-8.
func TestMessageIDLabelIsNeverANonce(t *testing.T) {
	if utf8.Valid(idLabel) {
		t.Fatalf("the label %q is valid UTF-8: a server could send it as its nonce", idLabel)
	}
	var info struct {
		Nonce string `json:"nonce"`
	}
	raw, _ := json.Marshal(string(idLabel)) // what a rogue server would send
	if err := json.Unmarshal([]byte(`{"nonce":`+string(raw)+`}`), &info); err != nil {
		t.Fatal(err)
	}
	if info.Nonce == string(idLabel) {
		t.Fatal("the label came through JSON unchanged: a server could have it signed")
	}
}
