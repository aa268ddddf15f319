package dag

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// EnvValue is the value of one environment variable of a command: Text,
// or, when Secret is set, the secret of that name. A secret is resolved by
// the worker that runs the command, at run time, from its own secrets
// directory: a composition, its records and every message on the bus carry
// only the name.
//
// In a composition an EnvValue is written as a string (or a number or
// boolean, meaning its text) or as {secret: NAME}; in JSON records it is a
// string or {"secret": "NAME"}.
type EnvValue struct {
	Text   string
	Secret string
}

// Text is a plain value.
func Text(s string) EnvValue { return EnvValue{Text: s} }

// SecretRef refers to the secret named name.
func SecretRef(name string) EnvValue { return EnvValue{Secret: name} }

// IsSecret reports whether the value is a secret's name.
func (v EnvValue) IsSecret() bool { return v.Secret != "" }

// MarshalJSON writes a plain value as a string and a secret as
// {"secret": NAME}.
func (v EnvValue) MarshalJSON() ([]byte, error) {
	if v.IsSecret() {
		return json.Marshal(secretJSON{Secret: v.Secret})
	}
	return json.Marshal(v.Text)
}

type secretJSON struct {
	Secret string `json:"secret"`
}

// UnmarshalJSON reads a string or {"secret": NAME} (no other field).
func (v *EnvValue) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var s secretJSON
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return fmt.Errorf("env value: expected a string or {\"secret\": NAME}: %w", err)
		}
		if !IsSecretName(s.Secret) {
			return fmt.Errorf("env value: %q is not a secret name (%s)", s.Secret, SecretNameRule)
		}
		*v = EnvValue{Secret: s.Secret}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("env value: expected a string or {\"secret\": NAME}: %w", err)
	}
	*v = EnvValue{Text: s}
	return nil
}

// MaxSecretNameLen is the longest secret name.
const MaxSecretNameLen = 128

// SecretNameRule says what a secret name may be.
const SecretNameRule = "letters, digits, '.', '_' and '-', starting with a letter, digit or '_', without '..', at most 128 characters"

// IsSecretName reports whether s can name a secret: one file name in a
// secrets directory, so never a path ('/') nor a way out of it ('..').
func IsSecretName(s string) bool {
	if s == "" || len(s) > MaxSecretNameLen || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
		if !ok || c == '.' && i+1 < len(s) && s[i+1] == '.' {
			return false
		}
	}
	return true
}

// SecretNameProblem says what is wrong with a secret name ("" when nothing).
func SecretNameProblem(s string) string {
	if IsSecretName(s) {
		return ""
	}
	return fmt.Sprintf("%q is not a secret name (%s)", s, SecretNameRule)
}
