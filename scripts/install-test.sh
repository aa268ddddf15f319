#!/usr/bin/env bash
# `go install github.com/gantry-dev/gantry/cmd/gantry@VERSION`, as a user
# runs it, against this checkout: a module proxy in a temporary folder
# serves the checkout (tracked and untracked files, nested modules left
# out, as the go command zips a module) at a version of its own; the other
# modules come from the usual proxy (or the module cache). Run outside any
# module, with a fresh GOPATH and GOBIN; the installed gantry must report
# that version. `make package-test` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
module=github.com/gantry-dev/gantry
version=v0.0.1-installtest.$(date +%s).$$
work=$(mktemp -d)
modcache=$($GO env GOMODCACHE)
cleanup() {
	chmod -R u+w "$modcache/$module@$version" 2>/dev/null || true
	rm -rf "$work" "$modcache/$module@$version" "$modcache/cache/download/$module/@v/$version".*
}
trap cleanup EXIT

dir=$work/proxy/$module/@v
mkdir -p "$dir"
echo "$version" >"$dir/list"
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$dir/$version.info"
cp go.mod "$dir/$version.mod"
git ls-files --cached --others --exclude-standard -z | python3 -c '
import os, sys, zipfile
prefix, out = sys.argv[1], sys.argv[2]
paths = [p for p in sys.stdin.read().split("\0") if p]
# folders holding a go.mod of their own are other modules
nested = {os.path.dirname(p) for p in paths if os.path.basename(p) == "go.mod" and os.path.dirname(p)}
def inside(p):
    return any(p == n or p.startswith(n + "/") for n in nested) or "vendor/" in "/" + p
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
    for p in sorted(paths):
        if os.path.isfile(p) and not os.path.islink(p) and not inside(p):
            z.write(p, prefix + "/" + p)
' "$module@$version" "$dir/$version.zip"

mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
echo "go install $module/cmd/gantry@$version (GOWORK=off, GOFLAGS=-mod=mod, fresh GOPATH and GOBIN)"
env GOWORK=off GOFLAGS=-mod=mod GOPATH="$work/gopath" GOMODCACHE="$modcache" GOBIN="$work/bin" \
	GOPROXY="file://$work/proxy,$($GO env GOPROXY)" GONOSUMDB=$module GOTOOLCHAIN=local \
	$GO install "$module/cmd/gantry@$version"
got=$("$work/bin/gantry" version)
echo "$got"
if ! grep -q "${version#v}" <<<"$got"; then
	echo "FAIL: the installed gantry does not report ${version#v}" >&2
	exit 1
fi
echo "PASS: go install $module/cmd/gantry@VERSION"
