package composition

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// An INI inventory's values are Python literals: Ansible's ini plugin
// passes each through ast.literal_eval and keeps the text when that fails.
// pyLiteral does the same for the literals an inventory holds: numbers,
// True/False/None, strings (with their prefixes, escapes and adjacent
// concatenation), lists, tuples (as lists) and dicts. Anything else
// (a name, a call, arithmetic, a syntax error) is not a literal, and the
// caller keeps the text, as Ansible does.

// errNotLiteral: the text is not a Python literal; it stays text.
var errNotLiteral = errors.New("not a Python literal")

// maxLiteralDepth bounds the nesting of a literal's lists and dicts.
const maxLiteralDepth = 64

// pyLiteral evaluates s as ast.literal_eval would. It returns
// errNotLiteral for text that is not a literal, and another error for a
// literal gantry cannot hold (a set, a complex number, an unhashable key),
// which Ansible cannot write out either.
func pyLiteral(s string) (any, error) {
	p := &pyParser{s: strings.TrimLeft(s, " \t")}
	p.next()
	v, err := p.tuple(0)
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, errNotLiteral
	}
	if p.bad != "" {
		return nil, errors.New(p.bad)
	}
	return v, nil
}

type pyTokKind uint8

const (
	tEOF pyTokKind = iota
	tNum
	tStr
	tName
	tOp
	tBad
)

type pyTok struct {
	kind  pyTokKind
	text  string // the token as written; an operator's character
	val   any    // a number's or a string's value
	bytes bool   // a bytes literal
	fstr  bool   // an f-string
	cplx  bool   // an imaginary number
}

type pyParser struct {
	s   string
	pos int
	tok pyTok
	// bad says why a literal cannot be held (a set, a complex number, an
	// unhashable key): reported once the whole text has parsed, since a
	// text that does not parse stays text whatever it holds.
	bad string
}

func (p *pyParser) unsupported(why string) {
	if p.bad == "" {
		p.bad = why
	}
}

const (
	whySet     = "a Python set, which Ansible cannot write out either: write a list [a, b]"
	whyComplex = "a complex number, which Ansible cannot write out either"
	whyKey     = "a dict key that is a list or a dict, which Python refuses (unhashable)"
)

// next reads the next token into p.tok.
func (p *pyParser) next() {
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == ' ' || c == '\t' || c == '\f' {
			p.pos++
			continue
		}
		if c == '#' {
			p.pos = len(p.s)
		}
		break
	}
	if p.pos >= len(p.s) {
		p.tok = pyTok{kind: tEOF}
		return
	}
	c := p.s[p.pos]
	switch {
	case c >= '0' && c <= '9', c == '.' && p.pos+1 < len(p.s) && isDigit(p.s[p.pos+1]):
		p.number()
	case isNameStart(c):
		p.nameOrString()
	case c == '"' || c == '\'':
		p.str("")
	case strings.IndexByte("[](){},:+-", c) >= 0:
		p.tok = pyTok{kind: tOp, text: string(c)}
		p.pos++
	default:
		p.tok = pyTok{kind: tBad}
		p.pos = len(p.s)
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isNameStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isNameByte(c byte) bool { return isNameStart(c) || isDigit(c) }

// nameOrString reads a name, or a string with a prefix (r, b, u, f and
// their pairs).
func (p *pyParser) nameOrString() {
	start := p.pos
	for p.pos < len(p.s) && isNameByte(p.s[p.pos]) {
		p.pos++
	}
	name := p.s[start:p.pos]
	if p.pos < len(p.s) && (p.s[p.pos] == '\'' || p.s[p.pos] == '"') {
		switch strings.ToLower(name) {
		case "r", "u", "b", "f", "br", "rb", "fr", "rf":
			p.str(strings.ToLower(name))
			return
		}
	}
	p.tok = pyTok{kind: tName, text: name}
}

// number reads an integer, a float or an imaginary number as Python's
// tokenizer does; a malformed one ("0755", "1e", "1_") is a syntax error.
func (p *pyParser) number() {
	start := p.pos
	for p.pos < len(p.s) && (isNameByte(p.s[p.pos]) || p.s[p.pos] == '.' ||
		(p.s[p.pos] == '+' || p.s[p.pos] == '-') && (p.s[p.pos-1] == 'e' || p.s[p.pos-1] == 'E') && !isHexStart(p.s[start:p.pos])) {
		p.pos++
	}
	text := p.s[start:p.pos]
	v, cplx, ok := pyNumber(text)
	if !ok {
		p.tok = pyTok{kind: tBad}
		return
	}
	p.tok = pyTok{kind: tNum, text: text, val: numberValue(v), cplx: cplx}
}

func isHexStart(s string) bool {
	return len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')
}

// pyNumber parses a Python number literal: its value as json.Number in
// Python's text of it (an int in decimal, a float as repr prints it), and
// whether it is imaginary.
func pyNumber(text string) (json.Number, bool, bool) {
	if len(text) > 1 && text[0] == '0' {
		base := 0
		switch text[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			digits := text[2:]
			if strings.HasPrefix(digits, "_") {
				digits = digits[1:]
			}
			return bigInt(digits, base)
		}
	}
	body, cplx := text, false
	if n := len(body); n > 0 && (body[n-1] == 'j' || body[n-1] == 'J') {
		body, cplx = body[:n-1], true
	}
	if !validUnderscores(body) {
		return "", false, false
	}
	plain := strings.ReplaceAll(body, "_", "")
	if strings.ContainsAny(plain, ".eE") || cplx {
		if !floatSyntax(plain) {
			return "", false, false
		}
		f, err := strconv.ParseFloat(plain, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return "", false, false
		}
		return json.Number(pyFloat(f)), cplx, true
	}
	if len(plain) > 1 && plain[0] == '0' && strings.Trim(plain, "0") != "" {
		return "", false, false // leading zeros: a syntax error in Python 3
	}
	n, _, ok := bigInt(body, 10)
	return n, false, ok
}

// bigInt parses digits (with single underscores between them) in base.
func bigInt(digits string, base int) (json.Number, bool, bool) {
	if !validUnderscores(digits) {
		return "", false, false
	}
	n, ok := new(big.Int).SetString(strings.ReplaceAll(digits, "_", ""), base)
	if !ok {
		return "", false, false
	}
	return json.Number(n.String()), false, true
}

// validUnderscores: no leading, trailing or doubled underscore, none next
// to a point or an exponent.
func validUnderscores(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '_' {
			continue
		}
		if i == 0 || i == len(s)-1 || !isAlnum(s[i-1]) || !isAlnum(s[i+1]) || isExp(s[i-1]) || isExp(s[i+1]) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isExp(c byte) bool { return c == 'e' || c == 'E' }

// floatSyntax: digits with at most one point, and an optional exponent
// with digits.
func floatSyntax(s string) bool {
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	if hasExp {
		exp = strings.TrimLeft(exp, "+-")
		if exp == "" || strings.Trim(exp, "0123456789") != "" || strings.ContainsAny(mant, "+-") {
			return false
		}
	}
	whole, frac, _ := strings.Cut(mant, ".")
	return whole+frac != "" && strings.Trim(whole+frac, "0123456789") == ""
}

// pyFloat writes a float as Python's repr does: 1.0, 1000.0, 1e+16,
// 1.5e-07, inf.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	mant, e, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(e)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return fmt.Sprintf("%se%s%02d", mant, sign, exp)
}

// str reads a string literal after its prefix (lower case, "" for none).
func (p *pyParser) str(prefix string) {
	q := p.s[p.pos]
	quote := string(q)
	if strings.HasPrefix(p.s[p.pos:], strings.Repeat(quote, 3)) {
		quote = strings.Repeat(quote, 3)
	}
	p.pos += len(quote)
	start := p.pos
	for {
		if p.pos >= len(p.s) {
			p.tok = pyTok{kind: tBad} // no closing quote
			return
		}
		if p.s[p.pos] == '\\' {
			p.pos += 2
			continue
		}
		if strings.HasPrefix(p.s[p.pos:], quote) {
			break
		}
		p.pos++
	}
	body := p.s[start:p.pos]
	p.pos += len(quote)
	raw := strings.Contains(prefix, "r")
	isBytes := strings.Contains(prefix, "b")
	if isBytes && !isASCII(body) {
		p.tok = pyTok{kind: tBad}
		return
	}
	val := body
	if !raw {
		var ok bool
		if val, ok = unescape(body, isBytes); !ok {
			p.tok = pyTok{kind: tBad}
			return
		}
	}
	p.tok = pyTok{kind: tStr, val: val, bytes: isBytes, fstr: strings.Contains(prefix, "f")}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// unescape decodes a string literal's backslash escapes; an unknown one
// stays as written, as in Python. \N{...} is not read (ok false).
func unescape(s string, isBytes bool) (string, bool) {
	if !strings.Contains(s, `\`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		c := s[i]
		if simple, ok := simpleEscapes[c]; ok {
			b.WriteByte(simple)
			continue
		}
		switch {
		case c >= '0' && c <= '7':
			n, j := 0, i
			for ; j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7'; j++ {
				n = n*8 + int(s[j]-'0')
			}
			i = j - 1
			if !writeCode(&b, n, isBytes) {
				return "", false
			}
		case c == 'x' || !isBytes && (c == 'u' || c == 'U'):
			width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+1+width > len(s) {
				return "", false
			}
			n, err := strconv.ParseUint(s[i+1:i+1+width], 16, 32)
			if err != nil || n > utf8.MaxRune {
				return "", false
			}
			i += width
			if !writeCode(&b, int(n), isBytes) {
				return "", false
			}
		case c == 'N' && !isBytes:
			return "", false
		default:
			b.WriteByte('\\')
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

var simpleEscapes = map[byte]byte{'\\': '\\', '\'': '\'', '"': '"', 'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v'}

// writeCode writes a code point, or a byte of a bytes literal (which
// Ansible then reads as UTF-8 text).
func writeCode(b *strings.Builder, n int, isBytes bool) bool {
	if isBytes {
		if n > 0xff {
			return false
		}
		b.WriteByte(byte(n))
		return true
	}
	b.WriteRune(rune(n))
	return true
}

// tuple reads an expression list: one value, or a tuple (as a list) when
// commas separate several or follow one.
func (p *pyParser) tuple(depth int) (any, error) {
	first, err := p.value(depth)
	if err != nil {
		return nil, err
	}
	if !p.isOp(",") {
		return first, nil
	}
	items := []any{first}
	for p.isOp(",") {
		p.next()
		if p.tok.kind == tEOF || p.isOp(")") {
			break
		}
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		items = append(items, v)
	}
	return items, nil
}

func (p *pyParser) isOp(op string) bool { return p.tok.kind == tOp && p.tok.text == op }

// value reads one literal: a signed number (or a complex sum), strings
// side by side, a name (True, False, None) or a container.
func (p *pyParser) value(depth int) (any, error) {
	if depth > maxLiteralDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxLiteralDepth)
	}
	switch p.tok.kind {
	case tNum:
		return p.sum(p.number1())
	case tStr:
		return p.strings()
	case tName:
		name := p.tok.text
		p.next()
		switch name {
		case "True":
			return true, nil
		case "False":
			return false, nil
		case "None":
			return nil, nil
		case "set":
			if p.isOp("(") {
				p.next()
				if p.isOp(")") {
					p.next()
					p.unsupported(whySet)
					return nil, nil
				}
			}
		}
		return nil, errNotLiteral
	case tOp:
		switch p.tok.text {
		case "+", "-":
			return p.signed()
		case "[":
			return p.list(depth)
		case "(":
			return p.paren(depth)
		case "{":
			return p.dict(depth)
		}
	}
	return nil, errNotLiteral
}

// number1 takes the current number token.
func (p *pyParser) number1() pyTok {
	t := p.tok
	p.next()
	return t
}

// signed reads -N or +N; a sign on anything else (True too) is not a
// literal.
func (p *pyParser) signed() (any, error) {
	neg := p.tok.text == "-"
	p.next()
	var t pyTok
	switch {
	case p.tok.kind == tNum:
		t = p.number1()
	case p.isOp("("):
		// -(1): the parentheses make no node of their own
		p.next()
		if p.tok.kind != tNum {
			return nil, errNotLiteral
		}
		t = p.number1()
		if !p.isOp(")") {
			return nil, errNotLiteral
		}
		p.next()
	default:
		return nil, errNotLiteral
	}
	if neg {
		switch v := t.val.(type) {
		case json.Number:
			t.val = negate(v)
		case string: // inf, nan
			t.val = strings.TrimPrefix("-"+v, "--")
		}
	}
	return p.sum(t)
}

// numberValue is a number as a typed value: inf and nan, which JSON does
// not have, as text.
func numberValue(n json.Number) any {
	if !json.Valid([]byte(n)) {
		return string(n)
	}
	return n
}

func negate(n json.Number) json.Number {
	s := string(n)
	switch {
	case strings.HasPrefix(s, "-"):
		return json.Number(s[1:])
	case s == "0":
		return n
	}
	return json.Number("-" + s)
}

// sum ends a number: N+Mj or N-Mj is a complex number; an imaginary
// number alone is one too.
func (p *pyParser) sum(t pyTok) (any, error) {
	if (p.isOp("+") || p.isOp("-")) && !t.cplx {
		p.next()
		if p.tok.kind != tNum || !p.tok.cplx {
			return nil, errNotLiteral
		}
		p.next()
		t.cplx = true
	}
	if t.cplx {
		p.unsupported(whyComplex)
		return nil, nil
	}
	return t.val, nil
}

// strings reads adjacent string literals, joined; a bytes literal is read
// as text, as Ansible does.
func (p *pyParser) strings() (any, error) {
	var b strings.Builder
	first := p.tok
	for p.tok.kind == tStr {
		if p.tok.bytes != first.bytes {
			return nil, errNotLiteral // str and bytes cannot be joined
		}
		if p.tok.fstr {
			return nil, errNotLiteral // an f-string is not a literal
		}
		b.WriteString(p.tok.val.(string))
		p.next()
	}
	s := b.String()
	if first.bytes && !utf8.ValidString(s) {
		return nil, errors.New("a bytes literal that is not UTF-8 text")
	}
	return s, nil
}

func (p *pyParser) list(depth int) (any, error) {
	p.next()
	items := []any{}
	for !p.isOp("]") {
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		items = append(items, v)
		if p.isOp(",") {
			p.next()
		} else if !p.isOp("]") {
			return nil, errNotLiteral
		}
	}
	p.next()
	return items, nil
}

// paren reads (), (x) or a tuple (x, y).
func (p *pyParser) paren(depth int) (any, error) {
	p.next()
	if p.isOp(")") {
		p.next()
		return []any{}, nil
	}
	v, err := p.tuple(depth + 1)
	if err != nil {
		return nil, err
	}
	if !p.isOp(")") {
		return nil, errNotLiteral
	}
	p.next()
	return v, nil
}

// dict reads {k: v, ...}; {a, b} is a set.
func (p *pyParser) dict(depth int) (any, error) {
	p.next()
	out := map[string]any{}
	for i := 0; !p.isOp("}"); i++ {
		k, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			if i == 0 && (p.isOp(",") || p.isOp("}")) {
				return nil, p.setOrNot(depth)
			}
			return nil, errNotLiteral
		}
		p.next()
		v, err := p.value(depth + 1)
		if err != nil {
			return nil, err
		}
		key, ok := dictKey(k)
		if !ok {
			p.unsupported(whyKey)
		}
		out[key] = v
		if p.isOp(",") {
			p.next()
		} else if !p.isOp("}") {
			return nil, errNotLiteral
		}
	}
	p.next()
	return out, nil
}

// setOrNot reads the rest of {a, b}: a set when it is a literal.
func (p *pyParser) setOrNot(depth int) error {
	for p.isOp(",") {
		p.next()
		if p.isOp("}") {
			break
		}
		if _, err := p.value(depth + 1); err != nil {
			return err
		}
	}
	if !p.isOp("}") {
		return errNotLiteral
	}
	p.next()
	p.unsupported(whySet)
	return nil
}

// dictKey is a dict key as JSON has it: Python's json writes numbers,
// booleans and None as text. A list or a dict cannot be a key.
func dictKey(k any) (string, bool) {
	switch k := k.(type) {
	case string:
		return k, true
	case json.Number:
		return string(k), true
	case bool:
		return strconv.FormatBool(k), true
	case nil:
		return "null", true
	}
	return "", false
}
