package dag

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// The functions templates call in place of text/template's own: each
// charges the renderer for the bytes it compares, looks up or makes,
// before it does so (a comparison of two long vars, or a printf that
// would make a gigabyte, is not a step like any other). The comparisons
// and index follow text/template's (Go's text/template/funcs.go, BSD
// licence), which a FuncMap cannot wrap.

// shq quotes a value for a POSIX shell: {{ shq .Vars.x }}.
func (r *renderer) shq(v any) (string, error) {
	s, err := r.textOf(v)
	if err != nil {
		return "", err
	}
	if err := r.made("shq", len(s)+2+3*strings.Count(s, "'")); err != nil {
		return "", err
	}
	q := shellQuoteTemplate(s)
	if HasOutputs(q) { // the value goes in quoted, when the node runs
		return quoteOutputs(q)
	}
	return q, nil
}

// fromjson reads a value that holds JSON, as a host's vars hold a list or
// a mapping of an inventory (ntp: ["a","b"]), so that a template can go
// over a list ({{ range fromjson .Vars.ntp }}) or read a field ({{
// (fromjson .Vars.cfg).port }}). Numbers stay as written. Decoding JSON
// costs about what a step does for each byte, so each byte is a step; more
// than MaxRendered of it is refused. A typed var (already decoded) is
// returned as it is.
func (r *renderer) fromjson(v any) (any, error) {
	if err := noOutputs("fromjson", v); err != nil {
		return nil, err
	}
	s, text := v.(string)
	if !text {
		switch v.(type) {
		case TemplateList, TemplateObject, json.Number, int64, bool:
			return v, nil
		}
		return nil, fmt.Errorf("fromjson of a %T: give it text", v)
	}
	if len(s) > MaxRendered {
		return nil, fmt.Errorf("fromjson of more than %d bytes", MaxRendered)
	}
	if err := r.spend(len(s) + 1); err != nil {
		return nil, err
	}
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		return nil, fmt.Errorf("fromjson: the value is not JSON: %v", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("fromjson: the value holds more than one JSON value")
	}
	return out, nil
}

func (r *renderer) printf(format string, args ...any) (string, error) {
	args, err := r.plain(args)
	if err != nil {
		return "", err
	}
	if err := noOutputs("printf", append([]any{format}, args...)...); err != nil {
		return "", err
	}
	if err = r.made("printf", printfSize(format, args)); err != nil {
		return "", err
	}
	return fmt.Sprintf(format, args...), nil
}

func (r *renderer) print(args ...any) (string, error) {
	args, err := r.plain(args)
	if err != nil {
		return "", err
	}
	if err = r.made("print", argsSize(args)+len(args)); err != nil {
		return "", err
	}
	return fmt.Sprint(args...), nil
}

func (r *renderer) println(args ...any) (string, error) {
	args, err := r.plain(args)
	if err != nil {
		return "", err
	}
	if err = r.made("println", argsSize(args)+len(args)+1); err != nil {
		return "", err
	}
	return fmt.Sprintln(args...), nil
}

// escaper is html, js or urlquery: each makes at most grow bytes of each
// byte it is given.
func (r *renderer) escaper(name string, grow int, escape func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		if err := noOutputs(name, args...); err != nil {
			return "", err
		}
		if err := r.made(name, grow*(argsSize(args)+len(args))); err != nil {
			return "", err
		}
		return escape(args...), nil
	}
}

// fmtWidthMax is the largest width or precision fmt takes; it prints
// %!(BADWIDTH) for a larger one.
const fmtWidthMax = 1_000_000

// printfSize is at least what fmt.Sprintf(format, args...) makes: every
// verb (each % of the format) may print the largest argument, grown as %x,
// %q or %U grow it, padded to the largest width or precision in the format
// or taken from the arguments with *.
func printfSize(format string, args []any) int {
	most, width, num := 0, 0, 0
	for _, a := range args {
		most = max(most, sizeOf(reflect.ValueOf(a)))
		if v := reflect.ValueOf(a); v.CanInt() && strings.Contains(format, "*") && v.Int() <= fmtWidthMax && v.Int() >= -fmtWidthMax {
			width = max(width, int(max(v.Int(), -v.Int())))
		}
	}
	for i := 0; i <= len(format); i++ {
		if i < len(format) && format[i] >= '0' && format[i] <= '9' {
			num = min(num*10+int(format[i]-'0'), fmtWidthMax+1)
			continue
		}
		if num <= fmtWidthMax {
			width = max(width, num)
		}
		num = 0
	}
	grow := 1
	if strings.ContainsAny(format, "xXqU") {
		grow = 6
	}
	return len(format) + strings.Count(format, "%")*(most*grow+width+32)
}

func argsSize(args []any) int {
	n := 0
	for _, a := range args {
		n += sizeOf(reflect.ValueOf(a))
	}
	return n
}

// sizeOf is about how many bytes fmt prints of v (a Stringer's String,
// which TemplateData and TemplateMap are).
func sizeOf(v reflect.Value) int {
	if v.IsValid() && v.CanInterface() {
		if s, ok := v.Interface().(fmt.Stringer); ok && v.Kind() != reflect.Pointer {
			return len(s.String())
		}
	}
	switch v.Kind() {
	case reflect.String:
		return v.Len()
	case reflect.Map:
		n := 8
		for it := v.MapRange(); it.Next(); {
			n += sizeOf(it.Key()) + sizeOf(it.Value()) + 4
		}
		return n
	case reflect.Slice, reflect.Array:
		n := 2
		for i := range v.Len() {
			n += sizeOf(v.Index(i)) + 1
		}
		return n
	case reflect.Struct:
		n := 2
		for i := range v.NumField() {
			n += sizeOf(v.Field(i)) + 1
		}
		return n
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return 8
		}
		return sizeOf(v.Elem())
	}
	return 32
}

// compared charges the strings among args, and refuses an output's
// value (known only when the node runs).
func (r *renderer) compared(args ...reflect.Value) error {
	n := 0
	for _, a := range args {
		if a = indirectInterface(a); a.Kind() == reflect.String {
			n += a.Len()
			if err := noOutputs("a comparison or index", a.String()); err != nil {
				return err
			}
		}
	}
	return r.spendBytes(n, comparedPerStep)
}

func indirectInterface(v reflect.Value) reflect.Value {
	if v.Kind() != reflect.Interface {
		return v
	}
	if v.IsNil() {
		return reflect.Value{}
	}
	return v.Elem()
}

var (
	errBadComparisonType = errors.New("invalid type for comparison")
	errNoComparison      = errors.New("missing argument for comparison")
)

type kind int

const (
	invalidKind kind = iota
	boolKind
	complexKind
	intKind
	floatKind
	stringKind
	uintKind
)

func basicKind(v reflect.Value) (kind, error) {
	switch v.Kind() {
	case reflect.Bool:
		return boolKind, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intKind, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return uintKind, nil
	case reflect.Float32, reflect.Float64:
		return floatKind, nil
	case reflect.Complex64, reflect.Complex128:
		return complexKind, nil
	case reflect.String:
		return stringKind, nil
	}
	return invalidKind, errBadComparisonType
}

func isNil(v reflect.Value) bool {
	if !v.IsValid() {
		return true
	}
	switch v.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice:
		return v.IsNil()
	}
	return false
}

func canCompare(v1, v2 reflect.Value) bool {
	k1, k2 := v1.Kind(), v2.Kind()
	return k1 == k2 || k1 == reflect.Invalid || k2 == reflect.Invalid
}

// eq is text/template's eq: arg1 == arg2[0] || arg1 == arg2[1] || ...
func (r *renderer) eq(arg1 reflect.Value, arg2 ...reflect.Value) (bool, error) {
	if err := r.compared(append([]reflect.Value{arg1}, arg2...)...); err != nil {
		return false, err
	}
	return eq(arg1, arg2...)
}

func eq(arg1 reflect.Value, arg2 ...reflect.Value) (bool, error) {
	arg1 = indirectInterface(arg1)
	if len(arg2) == 0 {
		return false, errNoComparison
	}
	k1, _ := basicKind(arg1)
	for _, arg := range arg2 {
		arg = indirectInterface(arg)
		k2, _ := basicKind(arg)
		truth, err := equal(arg1, arg, k1, k2)
		if err != nil || truth {
			return truth, err
		}
	}
	return false, nil
}

func equal(arg1, arg reflect.Value, k1, k2 kind) (bool, error) {
	if k1 != k2 {
		switch {
		case k1 == intKind && k2 == uintKind:
			return arg1.Int() >= 0 && uint64(arg1.Int()) == arg.Uint(), nil
		case k1 == uintKind && k2 == intKind:
			return arg.Int() >= 0 && arg1.Uint() == uint64(arg.Int()), nil
		case arg1.IsValid() && arg.IsValid():
			return false, fmt.Errorf("incompatible types for comparison: %v and %v", arg1.Type(), arg.Type())
		}
		return false, nil
	}
	switch k1 {
	case boolKind:
		return arg1.Bool() == arg.Bool(), nil
	case complexKind:
		return arg1.Complex() == arg.Complex(), nil
	case floatKind:
		return arg1.Float() == arg.Float(), nil
	case intKind:
		return arg1.Int() == arg.Int(), nil
	case stringKind:
		return arg1.String() == arg.String(), nil
	case uintKind:
		return arg1.Uint() == arg.Uint(), nil
	}
	if !canCompare(arg1, arg) {
		return false, fmt.Errorf("non-comparable types %s: %v, %s: %v", arg1, arg1.Type(), arg.Type(), arg)
	}
	if isNil(arg1) || isNil(arg) {
		return isNil(arg) == isNil(arg1), nil
	}
	if !arg.Type().Comparable() {
		return false, fmt.Errorf("non-comparable type %s: %v", arg, arg.Type())
	}
	return arg1.Interface() == arg.Interface(), nil
}

func (r *renderer) ne(arg1, arg2 reflect.Value) (bool, error) {
	equal, err := r.eq(arg1, arg2)
	return !equal, err
}

func (r *renderer) lt(arg1, arg2 reflect.Value) (bool, error) {
	if err := r.compared(arg1, arg2); err != nil {
		return false, err
	}
	return lt(arg1, arg2)
}

func lt(arg1, arg2 reflect.Value) (bool, error) {
	arg1 = indirectInterface(arg1)
	k1, err := basicKind(arg1)
	if err != nil {
		return false, err
	}
	arg2 = indirectInterface(arg2)
	k2, err := basicKind(arg2)
	if err != nil {
		return false, err
	}
	if k1 != k2 {
		switch {
		case k1 == intKind && k2 == uintKind:
			return arg1.Int() < 0 || uint64(arg1.Int()) < arg2.Uint(), nil
		case k1 == uintKind && k2 == intKind:
			return arg2.Int() >= 0 && arg1.Uint() < uint64(arg2.Int()), nil
		}
		return false, fmt.Errorf("incompatible types for comparison: %v and %v", arg1.Type(), arg2.Type())
	}
	switch k1 {
	case floatKind:
		return arg1.Float() < arg2.Float(), nil
	case intKind:
		return arg1.Int() < arg2.Int(), nil
	case stringKind:
		return arg1.String() < arg2.String(), nil
	case uintKind:
		return arg1.Uint() < arg2.Uint(), nil
	}
	return false, errBadComparisonType
}

func (r *renderer) le(arg1, arg2 reflect.Value) (bool, error) {
	if err := r.compared(arg1, arg2); err != nil {
		return false, err
	}
	less, err := lt(arg1, arg2)
	if less || err != nil {
		return less, err
	}
	return eq(arg1, arg2)
}

func (r *renderer) gt(arg1, arg2 reflect.Value) (bool, error) {
	lessOrEqual, err := r.le(arg1, arg2)
	if err != nil {
		return false, err
	}
	return !lessOrEqual, nil
}

func (r *renderer) ge(arg1, arg2 reflect.Value) (bool, error) {
	less, err := r.lt(arg1, arg2)
	if err != nil {
		return false, err
	}
	return !less, nil
}

// index is text/template's index: item[i][j]..., over maps, lists and
// strings; a key's bytes are charged (a map hashes them).
func (r *renderer) index(item reflect.Value, indexes ...reflect.Value) (reflect.Value, error) {
	if it := indirectInterface(item); it.Kind() == reflect.String {
		if err := noOutputs("index", it.String()); err != nil {
			return reflect.Value{}, err
		}
	}
	if err := r.compared(indexes...); err != nil {
		return reflect.Value{}, err
	}
	item = indirectInterface(item)
	if !item.IsValid() {
		return reflect.Value{}, errors.New("index of untyped nil")
	}
	for _, index := range indexes {
		index = indirectInterface(index)
		var isNil bool
		if item, isNil = indirect(item); isNil {
			return reflect.Value{}, errors.New("index of nil pointer")
		}
		next, err := indexOne(item, index)
		if err != nil {
			return reflect.Value{}, err
		}
		item = next
	}
	return item, nil
}

func indexOne(item, index reflect.Value) (reflect.Value, error) {
	switch item.Kind() {
	case reflect.Array, reflect.Slice, reflect.String:
		x, err := indexArg(index, item.Len())
		if err != nil {
			return reflect.Value{}, err
		}
		return item.Index(x), nil
	case reflect.Map:
		index, err := prepareArg(index, item.Type().Key())
		if err != nil {
			return reflect.Value{}, err
		}
		if x := item.MapIndex(index); x.IsValid() {
			return x, nil
		}
		return reflect.Zero(item.Type().Elem()), nil
	case reflect.Invalid:
		return reflect.Value{}, errors.New("index of untyped nil")
	}
	return reflect.Value{}, fmt.Errorf("can't index item of type %s", item.Type())
}

func indexArg(index reflect.Value, cap int) (int, error) {
	var x int64
	switch index.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		x = index.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		x = int64(index.Uint())
	case reflect.Invalid:
		return 0, errors.New("cannot index slice/array with nil")
	default:
		return 0, fmt.Errorf("cannot index slice/array with type %s", index.Type())
	}
	if x < 0 || int(x) < 0 || int(x) >= cap {
		return 0, fmt.Errorf("index out of range: %d", x)
	}
	return int(x), nil
}

func prepareArg(value reflect.Value, argType reflect.Type) (reflect.Value, error) {
	if !value.IsValid() {
		if !canBeNil(argType) {
			return reflect.Value{}, fmt.Errorf("value is nil; should be of type %s", argType)
		}
		return reflect.Zero(argType), nil
	}
	if value.Type().AssignableTo(argType) {
		return value, nil
	}
	if value.Type().ConvertibleTo(argType) && (value.Kind() == reflect.String) == (argType.Kind() == reflect.String) {
		return value.Convert(argType), nil
	}
	return reflect.Value{}, fmt.Errorf("value has type %s; should be %s", value.Type(), argType)
}

func canBeNil(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice:
		return true
	}
	return false
}

func indirect(v reflect.Value) (reflect.Value, bool) {
	for ; v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface; v = v.Elem() {
		if v.IsNil() {
			return v, true
		}
	}
	return v, false
}
