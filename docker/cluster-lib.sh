# shellcheck shell=bash
# What docker/cluster-test.sh and docker/cluster-chaos.sh share; sourced
# by them (bash, set -euo pipefail), never run.
#
# The stack is docker-compose.cluster.yml in its own compose project:
# CLUSTER_PROJECT_NAME, else "${COMPOSE_PROJECT_NAME:-gantry}-cluster", so
# checkouts with their own COMPOSE_PROJECT_NAME never touch each other's
# stack. Its images are gantry/*:GANTRY_TAG, by default dev for the project
# gantry and the project's name for any other (as the Makefile's `images`
# builds them). The host ports are ${GANTRY_CLUSTER_PORTS:-43}22..24 (NATS)
# and ${GANTRY_CLUSTER_MONITOR_PORTS:-83}22..24 (monitoring).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$root/bin
if [ -z "${COMPOSE:-}" ]; then
	if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
base_project=${COMPOSE_PROJECT_NAME:-gantry}
if [ -z "${GANTRY_TAG:-}" ]; then
	if [ "$base_project" = gantry ]; then GANTRY_TAG=dev; else GANTRY_TAG=$base_project; fi
fi
export GANTRY_TAG
# compose labels its containers with the project name in lower case: the
# lookups by label below would find nothing for "CI-1"
COMPOSE_PROJECT_NAME=${CLUSTER_PROJECT_NAME:-$base_project-cluster}
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME,,}
COMPOSE="$COMPOSE -f $root/docker-compose.cluster.yml"
cp=${GANTRY_CLUSTER_PORTS:-43}        # nats-N's client port on the host: ${cp}22..24
mp=${GANTRY_CLUSTER_MONITOR_PORTS:-83} # its monitoring port: ${mp}22..24
export GANTRY_CLUSTER_PORTS=$cp GANTRY_CLUSTER_MONITOR_PORTS=$mp
monitor_ports=("${mp}22" "${mp}23" "${mp}24")
export NATS_URL=nats://127.0.0.1:${cp}22,nats://127.0.0.1:${cp}23,nats://127.0.0.1:${cp}24
export NATS_NKEY=$root/dev/keys/nats/operator.nk
# shellcheck disable=SC2034 # used by the scripts that source this
work=$(mktemp -d)
t0_us=${EPOCHREALTIME/./}

# secs_since T_US: seconds (one decimal) from T_US (microseconds, as
# ${EPOCHREALTIME/./}) to now.
secs_since() {
	local d=$(((${EPOCHREALTIME/./} - $1) / 100000))
	printf '%d.%d' $((d / 10)) $((d % 10))
}
now_us() { echo "${EPOCHREALTIME/./}"; }
say() { printf '[%6ss] %s\n' "$(secs_since "$t0_us")" "$*"; }
check_py() { python3 "$root/docker/cluster_check.py" "$@"; }

# ids SERVICE: the running containers of one service of the project
ids() { docker ps -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" --filter "label=com.docker.compose.service=$1"; }
# all_ids: every container of the project, stopped ones too
all_ids() { docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"; }
cname() { docker inspect -f '{{.Name}}' "$1" | sed "s#^/##; s#^${COMPOSE_PROJECT_NAME}_##"; }
# meta_leader: the JetStream meta leader's server name (nats-N), as a
# running node's /jsz says
meta_leader() { check_py leader "${monitor_ports[@]}" 2>/dev/null; }
status_of() { "$bin/gantry" status "$1" -o json --timeout "${2:-10s}" 2>/dev/null | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["status"], sum(1 for f in d["formulas"].values() for n in f["nodes"].values() if n["status"] == "succeeded"))' 2>/dev/null || echo "? ?"; }

# nats_cmd IDENTITY: NATS_AS, the nats CLI as one of gantry's identities,
# with the reply prefix the server allows it (pkg/events/access.go
# InboxPrefix: _INBOX_<identity, "-" as "_">; a viewer's is _INBOX).
nats_cmd() {
	local prefix=_INBOX_${1//-/_}
	[ "$1" != viewer ] || prefix=_INBOX
	NATS_AS=("$bin/nats" --nkey "$root/dev/keys/nats/$1.nk" --inbox-prefix "$prefix")
}
# nats_as IDENTITY ARGS...: runs the nats CLI as IDENTITY
nats_as() {
	local NATS_AS
	nats_cmd "$1"
	shift
	"${NATS_AS[@]}" "$@"
}

# dump_events OUT: every message of GANTRY_EVENTS as JSON lines (seq,
# subject, msg_id, event), read with the state-store's identity. Says how
# many it read.
dump_events() {
	local out=$1 n NATS_AS
	n=$(nats_as state-store stream info GANTRY_EVENTS --json 2>"$out.err" |
		python3 -c 'import json, sys; print(json.load(sys.stdin)["state"]["messages"])' 2>>"$out.err") || n=0
	if [ "$n" = 0 ]; then
		: >"$out"
		echo "0 events (stream info: $(head -c 300 "$out.err"))"
		return 1
	fi
	nats_cmd state-store
	# A read right after a partition heals can get nothing within its wait
	# (its consumer made on a replica that is still catching up): read
	# again, up to 3 times, until it holds every message counted.
	local try
	for try in 1 2 3; do
		timeout 120 "${NATS_AS[@]}" sub --stream GANTRY_EVENTS --all --count "$n" --wait 10s --dump=- '>' >"$out.raw" 2>>"$out.err" || true
		check_py dump "$out.raw" "$out" 2>>"$out.err"
		rm -f "$out.raw"
		[ "$(wc -l <"$out")" -lt "$n" ] || break
		echo "dump $try: $(wc -l <"$out") of $n events; reading again" >>"$out.err"
	done
}

# keep_logs DIR: every container's log (killed and stopped ones too), and
# the project's containers as compose lists them.
keep_logs() {
	local c
	mkdir -p "$1/logs"
	$COMPOSE ps >"$1/ps.txt" 2>&1 || true
	for c in $(all_ids); do
		docker logs --timestamps "$c" >"$1/logs/$(cname "$c").log" 2>&1 || true
	done
}

# keep_targets DIR: each target's marker files and attempt files
keep_targets() {
	local t c
	mkdir -p "$1/targets"
	for t in 1 2 3; do
		c=$(ids target-$t)
		[ -n "$c" ] || continue
		docker exec "$c" sh -c 'for f in /var/lib/wuji/markers /var/lib/chaos/*.markers; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done; cd /root/.gantry/attempts 2>/dev/null && for f in *.exit; do [ -f "$f" ] && echo "$f $(cat "$f")"; done; ls -la --time-style=full-iso /root/.gantry/attempts' >"$1/targets/target-$t.txt" 2>&1 || true
	done
}

# ports_free: the stack's host ports are free (run after removing the
# project's own stack): another checkout or CI may hold the defaults.
ports_free() {
	local p
	for p in "${cp}22" "${cp}23" "${cp}24" "${mp}22" "${mp}23" "${mp}24"; do
		python3 -c 'import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' "$p" 2>/dev/null || {
			echo "port 127.0.0.1:$p is in use (another stack?): set GANTRY_CLUSTER_PORTS and GANTRY_CLUSTER_MONITOR_PORTS (the ports' leading digits)" >&2
			return 1
		}
	done
}

# cluster_start: from nothing (down -v), the stack up and the planner and
# state-store answering; says what runs.
cluster_start() {
	local i p
	for i in nats planner executor health-gate state-store target; do
		docker image inspect "gantry/$i:$GANTRY_TAG" >/dev/null 2>&1 || {
			echo "no image gantry/$i:$GANTRY_TAG: make images (with the same COMPOSE_PROJECT_NAME or GANTRY_TAG)" >&2
			return 1
		}
	done
	$COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true
	ports_free || return 1
	"$root/docker/cluster-conf.sh" >/dev/null
	$COMPOSE up -d 2>&1 | tail -2 | sed 's/^/    /'
	"$bin/gantry" ping --service gantry-planner --service gantry-state-store --wait 90s >/dev/null || return 1
	say "    $COMPOSE_PROJECT_NAME (images gantry/*:$GANTRY_TAG, NATS on 127.0.0.1:${cp}22-${cp}24, monitoring ${mp}22-${mp}24): $($COMPOSE ps --services --filter status=running | tr '\n' ' ')"
	for p in "${monitor_ports[@]}"; do
		python3 -c 'import json, sys, urllib.request; d = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/varz", timeout=2)); print("   ", d["server_name"], d["version"], "routes", len(d.get("cluster", {}).get("urls") or []))' "$p"
	done
}

# cluster_remove: down -v, unless KEEP is set
cluster_remove() {
	if [ -z "${KEEP:-}" ]; then $COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true; fi
}
