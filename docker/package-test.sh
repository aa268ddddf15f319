#!/usr/bin/env bash
# `make package-test`: gantry's releases, checked as a user gets them.
#   0. scripts/install-test.sh: `go install .../cmd/gantry@VERSION` of this
#      checkout from a module proxy, with a fresh GOPATH and GOBIN
#   1. tools/dist's tests: the .deb and .rpm inspected with dpkg-deb -c/-I and
#      rpm -qp (files, modes, conffiles, scripts), the systemd units checked
#      with systemd-analyze verify, every env file variable one the services read
#   2. this machine's .deb and .rpm built from the real binaries (VERSION
#      stamped), inspected with dpkg-deb and rpm
#   3. a Debian 12 container (its image made by docker/target-base.sh, with no
#      registry) on a network of its own with nats-server (gantry/nats, with
#      authentication): dpkg -i, the gantry user and folders checked; the
#      planner and the state-store started as their units say (User,
#      WorkingDirectory, EnvironmentFile, ExecStart), each with its own NATS
#      identity; `gantry ping` from the container until both answer
#   4. dpkg -i again (an upgrade): the edited env files kept; dpkg -r: binaries
#      and units gone, env files kept
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
export TARGET_BASE=${TARGET_BASE:-gantry/debian-sshd-base:bookworm}
tag=${GANTRY_TAG:-dev}
version=${PACKAGE_TEST_VERSION:-0.9.1}
arch=$($GO env GOARCH)
work=$(mktemp -d)
name=gantry-pkgtest-$$
t0=$EPOCHREALTIME

say() { printf '[%6ss] %s\n' "$(awk -v a="$EPOCHREALTIME" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')" "$*"; }
cleanup() {
	docker rm -f "$name-nats" "$name-deb" >/dev/null 2>&1 || true
	docker network rm "$name" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	say "FAIL: $*"
	docker logs --tail 30 "$name-nats" 2>&1 | sed 's/^/nats: /' || true
	docker exec "$name-deb" sh -c 'tail -n 30 /var/log/gantry-*.log' 2>&1 || true
	exit 1
}
in_deb() { docker exec "$name-deb" "$@"; }

missing=()
command -v rpm >/dev/null || missing+=(rpm)
command -v systemd-analyze >/dev/null || missing+=(systemd)
command -v dpkg-deb >/dev/null || missing+=(dpkg)
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]} (apt-get)"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

say "0. go install .../cmd/gantry@VERSION"
GO=$GO scripts/install-test.sh

say "1. packaging tests (tools/dist)"
(cd tools/dist && GOWORK=off $GO test -count=1 .)

say "2. the $arch .deb and .rpm of $version from the real binaries"
bins=$work/bin
mkdir -p "$bins"
flags="-s -w -X github.com/gantry-dev/gantry/pkg/buildinfo.version=$version"
CGO_ENABLED=0 $GO build -trimpath -ldflags "$flags" -o "$bins/gantry" ./cmd/gantry
for s in planner executor health-gate state-store; do
	CGO_ENABLED=0 $GO build -trimpath -ldflags "$flags" -o "$bins/gantry-$s" "./services/$s"
done
(cd tools/dist && GOWORK=off $GO run . -config "$root/packaging/nfpm.yaml" -repo "$root" \
	-version "$version" -arch "$arch" -bin "$bins" -out "$work/pkg") >"$work/paths"
deb=$(grep '\.deb$' "$work/paths")
rpm=$(grep '\.rpm$' "$work/paths")
# (outputs kept whole: grep -q ending a pipe early fails it under pipefail)
info=$(dpkg-deb -I "$deb") list=$(dpkg-deb -c "$deb") rpmq=$(rpm -qp --qf '%{NAME} %{VERSION}' "$rpm") rpml=$(rpm -qlp "$rpm")
grep -q "Version: $version" <<<"$info" || fail "dpkg-deb -I: no Version: $version"
grep -q ' \./usr/bin/gantry-state-store$' <<<"$list" || fail "dpkg-deb -c: no /usr/bin/gantry-state-store"
[ "$rpmq" = "gantry $version" ] || fail "rpm -qp: $rpmq"
grep -qx /usr/lib/systemd/system/gantry-planner.service <<<"$rpml" || fail "rpm -qlp: no gantry-planner.service"
say "   $(basename "$deb"), $(basename "$rpm")"

say "3. images: Debian 12 ($TARGET_BASE), gantry/nats:$tag"
docker/target-base.sh
if ! docker image inspect "gantry/nats:$tag" >/dev/null 2>&1; then
	${MAKE:-make} -s linux-bins >/dev/null
	docker build -q -f docker/nats.Dockerfile -t "gantry/nats:$tag" bin/linux >/dev/null
fi
"$bins/gantry" auth init --dir "$work/nats" >/dev/null
chmod 0644 "$work"/nats/* # read by root in the containers, whoever owns them here
docker network create "$name" >/dev/null
docker run -d --name "$name-nats" --network "$name" --network-alias nats \
	-v "$work/nats/server.conf:/auth/server.conf:ro" \
	"gantry/nats:$tag" -c /auth/server.conf --jetstream --store_dir /data >/dev/null
docker run -d --name "$name-deb" --network "$name" \
	-v "$deb:/tmp/gantry.deb:ro" -v "$work/nats:/tmp/nats:ro" \
	"$TARGET_BASE" sleep infinity >/dev/null

say "   dpkg -i $(basename "$deb")"
in_deb dpkg -i /tmp/gantry.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -i"; }
got=$(in_deb gantry version)
grep -q "$version" <<<"$got" || fail "gantry version: $got"
got=$(in_deb getent passwd gantry) || fail "no gantry user"
grep -q ':/var/lib/gantry:/usr/sbin/nologin$' <<<"$got" || fail "gantry user: $got"
[ "$(in_deb stat -c '%U:%G %a' /etc/gantry/nats)" = "root:gantry 750" ] || fail "/etc/gantry/nats: $(in_deb stat -c '%U:%G %a' /etc/gantry/nats)"
[ "$(in_deb stat -c '%U:%G %a' /var/lib/gantry)" = "gantry:gantry 750" ] || fail "/var/lib/gantry: $(in_deb stat -c '%U:%G %a' /var/lib/gantry)"

# run-unit SERVICE: starts gantry-SERVICE as its unit says, in the background;
# prints its pid.
docker exec -i "$name-deb" tee /usr/local/bin/run-unit >/dev/null <<'SCRIPT'
#!/bin/bash
set -euo pipefail
unit=/usr/lib/systemd/system/gantry-$1.service
key() { sed -n "s/^$1=//p" "$unit"; }
user=$(key User) group=$(key Group) dir=$(key WorkingDirectory) envfile=$(key EnvironmentFile) exec=$(key ExecStart)
cd "$dir"
set -a
. "$envfile" # KEY=value lines only, as systemd reads them
set +a
setpriv --reuid="$user" --regid="$group" --init-groups -- sh -c "exec $exec" >"/var/log/gantry-$1.log" 2>&1 &
echo $!
SCRIPT
in_deb chmod +x /usr/local/bin/run-unit
declare -A pid
for s in planner state-store; do
	in_deb install -m 0640 -g gantry "/tmp/nats/$s.nk" "/etc/gantry/nats/$s.nk"
	in_deb sed -i -e 's|^NATS_URL=.*|NATS_URL=nats://nats:4222|' -e "s|^#NATS_NKEY=|NATS_NKEY=|" "/etc/gantry/$s.env"
	pid[$s]=$(in_deb run-unit "$s")
	say "   gantry-$s started as its unit says (pid ${pid[$s]})"
done
in_deb gantry ping --server nats://nats:4222 --nkey /tmp/nats/operator.nk \
	--service gantry-planner --service gantry-state-store --wait 60s >/dev/null || fail "gantry ping: the services do not answer"
for s in planner state-store; do
	owner=$(in_deb stat -c %U "/proc/${pid[$s]}") || fail "gantry-$s is not running"
	[ "$owner" = gantry ] || fail "gantry-$s runs as $owner"
done
say "   gantry ping: gantry-planner and gantry-state-store answer, running as the gantry user"

say "4. dpkg -i again (upgrade): edited env files kept; dpkg -r"
in_deb dpkg -i /tmp/gantry.deb >"$work/dpkg2.log" 2>&1 || { cat "$work/dpkg2.log"; fail "dpkg -i (again)"; }
in_deb grep -qx 'NATS_NKEY=/etc/gantry/nats/planner.nk' /etc/gantry/planner.env || fail "the upgrade replaced /etc/gantry/planner.env"
in_deb dpkg -r gantry >"$work/dpkg3.log" 2>&1 || { cat "$work/dpkg3.log"; fail "dpkg -r"; }
if in_deb test -e /usr/bin/gantry-planner || in_deb test -e /usr/lib/systemd/system/gantry-planner.service; then
	fail "dpkg -r left binaries or units"
fi
in_deb test -f /etc/gantry/planner.env || fail "dpkg -r removed the env files"
say "PASS"
