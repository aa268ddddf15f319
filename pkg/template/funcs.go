package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	gotemplate "text/template"
)

// The functions templates call. In place of text/template's own, those
// that could be given an output's marker (comparisons, index, printf, the
// escapers) refuse it: its value is known only when the node runs. The
// comparisons and index follow text/template's (Go's
// text/template/funcs.go, BSD licence), which a FuncMap cannot wrap.

// funcs are the functions templates may call: gantry's (shq, fromjson,
// output, and those the renderer adds: gantry_loop, gantry_print) and,
// in place of text/template's, those that check their arguments for
// output markers.
func (r *Renderer) funcs() gotemplate.FuncMap {
	return gotemplate.FuncMap{
		loopFunc: r.loop, printFunc: r.printed, "shq": r.shq, "index": r.index, "fromjson": r.fromjson, "output": r.output,
		"printf": r.printf, "print": r.printText, "println": r.printLine,
		"html": r.escaper("html", gotemplate.HTMLEscaper), "js": r.escaper("js", gotemplate.JSEscaper),
		"urlquery": r.escaper("urlquery", gotemplate.URLQueryEscaper),
		"eq":       r.eq, "ne": r.ne, "lt": r.lt, "le": r.le, "gt": r.gt, "ge": r.ge,
	}
}

// capped refuses what function fn made when it is more than MaxRendered
// bytes, or when the renderer is out of time.
func (r *Renderer) capped(fn, s string) (string, error) {
	if err := r.inTime(); err != nil {
		return "", err
	}
	return capped(fn, s)
}

// textsFit refuses args whose texts alone are more than MaxRendered bytes,
// before print or println puts them together.
func textsFit(fn string, args []any) error {
	n := 0
	for _, a := range args {
		if s, ok := a.(string); ok {
			n += len(s)
		}
	}
	if n > MaxRendered {
		return fmt.Errorf("%s makes more than %d bytes", fn, MaxRendered)
	}
	return nil
}

// capped refuses what function fn made when it is more than MaxRendered
// bytes.
func capped(fn, s string) (string, error) {
	if len(s) > MaxRendered {
		return "", fmt.Errorf("%s makes more than %d bytes", fn, MaxRendered)
	}
	return s, nil
}

// shq quotes a value for a POSIX shell: {{ shq .Vars.x }}. An output's
// marker goes in marked quoted, and is quoted when the node runs.
func (r *Renderer) shq(v any) (string, error) {
	s, err := textOf(v)
	if err != nil {
		return "", err
	}
	q, err := r.capped("shq", ShellQuote(s))
	if err != nil || r.outputs == nil || !r.outputs.Has(q) {
		return q, err
	}
	return r.outputs.Quoted(q)
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// output renders a read of an output as its marker.
func (r *Renderer) output(target, name string, host ...string) (string, error) {
	if r.outputs == nil {
		return "", fmt.Errorf("output %q %q: outputs cannot be read here", target, name)
	}
	return r.outputs.Read(target, name, host...)
}

// fromjson reads a value that holds JSON, as a host's vars hold a list or
// a mapping of an inventory (ntp: ["a","b"]), so that a template can go
// over a list ({{ range fromjson .Vars.ntp }}) or read a field ({{
// (fromjson .Vars.cfg).port }}). Numbers stay as written. A typed var
// (already decoded) is returned as it is.
func (r *Renderer) fromjson(v any) (any, error) {
	if err := r.inTime(); err != nil {
		return nil, err
	}
	if err := r.noOutputs("fromjson", v); err != nil {
		return nil, err
	}
	s, text := v.(string)
	if !text {
		switch v.(type) {
		case List, Object, json.Number, int64, bool:
			return v, nil
		}
		return nil, fmt.Errorf("fromjson of a %T: give it text", v)
	}
	out, err := decodeJSON(s)
	if err != nil {
		return nil, fmt.Errorf("fromjson: the value is %w", err)
	}
	return out, nil
}

func (r *Renderer) printf(format string, args ...any) (string, error) {
	args, err := plain(args)
	if err != nil {
		return "", err
	}
	if err := r.noOutputs("printf", append([]any{format}, args...)...); err != nil {
		return "", err
	}
	return r.capped("printf", fmt.Sprintf(format, args...))
}

func (r *Renderer) printText(args ...any) (string, error) {
	args, err := plain(args)
	if err != nil {
		return "", err
	}
	if err := textsFit("print", args); err != nil {
		return "", err
	}
	return r.capped("print", fmt.Sprint(args...))
}

func (r *Renderer) printLine(args ...any) (string, error) {
	args, err := plain(args)
	if err != nil {
		return "", err
	}
	if err := textsFit("println", args); err != nil {
		return "", err
	}
	return r.capped("println", fmt.Sprintln(args...))
}

// escaper is html, js or urlquery.
func (r *Renderer) escaper(name string, escape func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		if err := r.noOutputs(name, args...); err != nil {
			return "", err
		}
		return r.capped(name, escape(args...))
	}
}

// noOutputs refuses to pass a read's value to function fn, which would
// see its marker: only printing it (print, println) and shq may.
func (r *Renderer) noOutputs(fn string, args ...any) error {
	if r.outputs == nil {
		return nil
	}
	for _, a := range args {
		if s, ok := a.(string); ok && r.outputs.Has(s) {
			return fmt.Errorf("%s of an output: the value is known only when the node runs; print it, or quote it with shq", fn)
		}
	}
	return nil
}

// compared refuses an output's value among the arguments of a comparison
// or index.
func (r *Renderer) compared(args ...reflect.Value) error {
	for _, a := range args {
		if a = indirectInterface(a); a.Kind() == reflect.String {
			if err := r.noOutputs("a comparison or index", a.String()); err != nil {
				return err
			}
		}
	}
	return nil
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
func (r *Renderer) eq(arg1 reflect.Value, arg2 ...reflect.Value) (bool, error) {
	if err := r.inTime(); err != nil {
		return false, err
	}
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

func (r *Renderer) ne(arg1, arg2 reflect.Value) (bool, error) {
	equal, err := r.eq(arg1, arg2)
	return !equal, err
}

func (r *Renderer) lt(arg1, arg2 reflect.Value) (bool, error) {
	if err := r.inTime(); err != nil {
		return false, err
	}
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

func (r *Renderer) le(arg1, arg2 reflect.Value) (bool, error) {
	if err := r.compared(arg1, arg2); err != nil {
		return false, err
	}
	less, err := lt(arg1, arg2)
	if less || err != nil {
		return less, err
	}
	return eq(arg1, arg2)
}

func (r *Renderer) gt(arg1, arg2 reflect.Value) (bool, error) {
	lessOrEqual, err := r.le(arg1, arg2)
	if err != nil {
		return false, err
	}
	return !lessOrEqual, nil
}

func (r *Renderer) ge(arg1, arg2 reflect.Value) (bool, error) {
	less, err := r.lt(arg1, arg2)
	if err != nil {
		return false, err
	}
	return !less, nil
}

// index is text/template's index: item[i][j]..., over maps, lists and
// strings.
func (r *Renderer) index(item reflect.Value, indexes ...reflect.Value) (reflect.Value, error) {
	if err := r.inTime(); err != nil {
		return reflect.Value{}, err
	}
	if it := indirectInterface(item); it.Kind() == reflect.String {
		if err := r.noOutputs("index", it.String()); err != nil {
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
