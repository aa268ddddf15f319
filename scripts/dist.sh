#!/usr/bin/env bash
# `make dist VERSION=x.y.z`: the release files in dist/ (DIST_DIR):
#   gantry_VERSION_linux_{amd64,arm64}.tar.gz   the CLI and the four services,
#                                              their systemd units and env files,
#                                              LICENSE, README.md
#   gantry_VERSION_darwin_{amd64,arm64}.tar.gz  the CLI, LICENSE, README.md
#   gantry_VERSION_{amd64,arm64}.deb, gantry-VERSION-1.{x86_64,aarch64}.rpm
#   SHA256SUMS                                  `sha256sum -c SHA256SUMS` checks them
# Static binaries (CGO_ENABLED=0), the version stamped into pkg/buildinfo.
# File times are the commit's (SOURCE_DATE_EPOCH), so a rebuild of a
# commit gives the same archives.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
version=${VERSION:?VERSION=x.y.z is required}
version=${version#v}
semver='^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
if ! [[ $version =~ $semver ]]; then
	echo "dist: VERSION=$version is not a semantic version (x.y.z, x.y.z-rc.1)" >&2
	exit 2
fi
GO=${GO:-go}
out=${DIST_DIR:-$root/dist}
work=$out/build
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
ldflags="-s -w -X github.com/gantry-dev/gantry/pkg/buildinfo.version=$version"
services=(planner executor health-gate state-store)

rm -rf "$out"
mkdir -p "$work"

# build GOOS GOARCH DIR PKG NAME: one static binary.
build() {
	CGO_ENABLED=0 GOOS=$1 GOARCH=$2 $GO build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$3/$5" "$4"
}

# archive NAME DIR: NAME.tar.gz of DIR's files under NAME/, owned by root.
archive() {
	tar -C "$2" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--transform "s,^\.,$1," -c . | gzip -9n >"$out/$1.tar.gz"
	echo "$out/$1.tar.gz"
}

for arch in amd64 arm64; do
	dir=$work/linux_$arch
	mkdir -p "$dir/systemd" "$dir/env"
	build linux "$arch" "$dir" ./cmd/gantry gantry
	for s in "${services[@]}"; do
		build linux "$arch" "$dir" "./services/$s" "gantry-$s"
		cp "packaging/systemd/gantry-$s.service" "$dir/systemd/"
		cp "packaging/env/$s.env" "$dir/env/"
	done
	cp LICENSE README.md "$dir/"
	archive "gantry_${version}_linux_$arch" "$dir"
	(cd tools/dist && GOWORK=off $GO run . -config "$root/packaging/nfpm.yaml" -repo "$root" \
		-version "$version" -arch "$arch" -bin "$dir" -out "$out")
done
for arch in amd64 arm64; do
	dir=$work/darwin_$arch
	mkdir -p "$dir"
	build darwin "$arch" "$dir" ./cmd/gantry gantry
	cp LICENSE README.md "$dir/"
	archive "gantry_${version}_darwin_$arch" "$dir"
done
rm -rf "$work"
(cd "$out" && sha256sum -- *.tar.gz *.deb *.rpm >SHA256SUMS)
echo "$out/SHA256SUMS"
