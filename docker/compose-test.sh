#!/usr/bin/env bash
# `make compose-test`: the compose stack from nothing to nothing.
#   1. down -v and remove the gantry images; `make up` builds and starts it all
#   2. the kubernetes example on the three targets; its lifecycle events
#      checked from `nats sub` and its result from the state-store
#   2c. a node and a gate use {secret: demo_token} (dev/secrets): the output
#      line reads ***, and the token is in no capture, CLI output or log
#   3. a delete run takes it apart; then a create run with target-2 stopped
#      mid-run: its node fails, its dependents are blocked, the rest finish
#   4. target-2 started again, `gantry retry`, and the executor that is running
#      a node restarted mid-run: the run still completes
#   4b. nats-server's log: everything it refused was asked by the client with
#      no credentials (a service or the operator refused: a missing permission)
#   5. down -v: no container, network or volume left
# The stack runs with NATS authentication: the gantry CLI submits and
# controls as the operator (dev/keys/nats/operator.nk); the nats CLI's
# captures run with no credentials (a viewer); 2b checks that a client with
# no credentials cannot submit, publish events or remove streams.
# KEEP=1 leaves the stack up at the end (no step 5).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$root/bin
MAKE=${MAKE:-make}
if [ -z "${COMPOSE:-}" ]; then
	if docker compose version >/dev/null 2>&1; then COMPOSE="docker compose"; else COMPOSE=docker-compose; fi
fi
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-gantry}
port=${GANTRY_NATS_PORT:-4222}
export NATS_URL=nats://127.0.0.1:$port
example=examples/compose/kubernetes.yaml
work=$(mktemp -d)
t0=$EPOCHREALTIME
subs=()

say() { printf '[%6ss] %s\n' "$(awk -v a="$EPOCHREALTIME" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')" "$*"; }
fail() {
	say "FAIL: $*"
	$COMPOSE ps || true
	$COMPOSE logs --no-color --tail 30 planner executor health-gate state-store 2>&1 | tail -120 || true
	exit 1
}
cleanup() {
	for p in "${subs[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ -z "${KEEP:-}" ]; then $COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true; fi
	rm -rf "$work"
}
trap cleanup EXIT
if ! command -v python3 >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
fi

# events FILE WORKFLOW_ID: the CloudEvents of one workflow from a `nats sub --raw` capture, one per line.
check() { python3 "$root/docker/compose_check.py" "$@"; }
container_of() { $COMPOSE ps -q "$1"; }

say "compose: $($COMPOSE version | head -1)"
say "1. from nothing: down -v, gantry images removed"
$COMPOSE down -v --remove-orphans >/dev/null 2>&1 || true
for i in nats planner executor health-gate state-store target keys; do docker rmi -f "gantry/$i:${GANTRY_TAG:-dev}" >/dev/null 2>&1 || true; done
[ -z "$(docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME")" ] || fail "containers of $COMPOSE_PROJECT_NAME left"
$MAKE --no-print-directory tools >/dev/null
# (the legacy builder's deprecation notice is left out: there is no buildx here)
$MAKE --no-print-directory up COMPOSE="$COMPOSE" 2>&1 | grep -v '^\(for\|cd\|CGO\|docker build\|DEPRECATED\|  *Install the buildx\|  *https://docs.docker.com/go/buildx\|$\)' | sed 's/^/    /'
$COMPOSE ps
# anon: no credentials, a viewer; everything else is the operator.
anon() { env -u NATS_NKEY -u NATS_CREDS "$@"; }
# sub FILE SUBJECT: a `nats sub --raw` without credentials in the background, its
# pid (nats's own: env execs it) killed on exit.
sub() {
	env -u NATS_NKEY -u NATS_CREDS "$bin/nats" sub --raw "$2" >"$1" 2>>"$work/sub.err" &
	subs+=($!)
}
keys=$root/dev/keys/nats
export NATS_NKEY=$keys/operator.nk
say "services registered (nats micro ls, no credentials):"
anon "$bin/nats" micro ls | sed 's/^/    /'
anon "$bin/nats" micro ls | grep -q gantry-planner || fail "gantry-planner not listed"
anon "$bin/nats" micro ls | grep -q gantry-state-store || fail "gantry-state-store not listed"

sub "$work/decky.jsonl" 'decky.*.lifecycle'
sub "$work/workflow.jsonl" 'workflow.*.lifecycle'
sleep 1

say "2. submit $example at target-1..3"
id=$("$bin/gantry" submit -q "$example")
say "workflow $id accepted; gantry watch:"
"$bin/gantry" watch "$id" >"$work/watch1.txt" || { cat "$work/watch1.txt"; fail "run 1 did not succeed"; }
sed -n '1,4p;$p' "$work/watch1.txt" | sed 's/^/    /'
say "lifecycle events from nats sub 'decky.*.lifecycle':"
check events "$work/decky.jsonl" "$work/workflow.jsonl" "$id" "$example" | sed 's/^/    /' || fail "run 1 events"
"$bin/gantry" status "$id" -o json >"$work/status1.json"
"$bin/nats" req state.workflow "{\"workflow_id\":\"$id\"}" --raw >"$work/state1.json" 2>/dev/null
say "state-store (nats req state.workflow):"
check state "$work/state1.json" succeeded | sed 's/^/    /' || fail "run 1 state"
for t in target-1 target-2 target-3; do
	say "on $t: /var/lib/wuji holds $(docker exec "$(container_of $t)" ls /var/lib/wuji | tr '\n' ' ')"
done

say "2b. no credentials: watching works (above), but no submit, no forged event, no stream removed"
# The streams as they are: GANTRY_EVENTS as a viewer may see it; GANTRY_DISPATCH
# only as a service that uses it (the planner's seed, its inbox prefix). A
# stream removed would come back (the services re-create missing streams), so
# its creation time is compared, and a purge would move the first sequence.
streams() {
	for s in GANTRY_DISPATCH GANTRY_EVENTS; do
		if [ $s = GANTRY_DISPATCH ]; then
			"$bin/nats" --nkey "$keys/planner.nk" --inbox-prefix _INBOX_planner stream info $s --json
		else
			anon "$bin/nats" stream info $s --json
		fi | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["config"]["name"], "created", d["created"], "first_seq", d["state"]["first_seq"])' || return 1
	done
}
before=$(streams) || fail "stream info"
listed=$("$bin/gantry" list | wc -l)
if out=$(anon "$bin/gantry" submit -q "$example" 2>&1); then fail "anonymous gantry submit accepted: $out"; fi
echo "$out" | grep -q "not allowed" || fail "anonymous gantry submit: $out"
say "    gantry submit: $out"
# a composition the planner accepts (checked as the operator with
# workflow.validate), so the refusal below is the server's, not the planner's
evil='{"name":"anonymous-submit","hosts":{"t":{"address":"target-1:22","user":"root"}},"formulas":[{"id":"a","server":"t","nodes":[{"name":"n","run":"touch /var/lib/wuji/anonymous-was-here"}]}]}'
"$bin/nats" req workflow.validate "$evil" --raw 2>/dev/null | python3 -c 'import json, sys; sys.exit(json.load(sys.stdin)["status"] != "valid")' || fail "the anonymous test composition is not valid"
refused() {
	local out
	out=$(anon "$bin/nats" --timeout 2s "$@" 2>&1 || true)
	echo "$out" | grep -q "Permissions Violation" || fail "anonymous nats $1 $2: not refused: $out"
	say "    nats $1 $2: $(echo "$out" | grep -o 'Permissions Violation for [A-Za-z]* to "[^"]*"' | head -1)"
}
refused req workflow.submit "$evil"
refused pub decky.cp-0.lifecycle '{}'
refused stream rm GANTRY_DISPATCH -f
refused stream purge GANTRY_EVENTS -f
sleep 6 # longer than the services' topology check (5 s): a removed stream would be back, re-created
[ "$("$bin/gantry" list | wc -l)" = "$listed" ] || fail "a workflow was added by an anonymous client (operator's gantry list)"
[ "$(anon "$bin/gantry" list | wc -l)" = "$listed" ] || fail "a workflow was added by an anonymous client (viewer's gantry list)"
grep -q '"workflow":"wuji-compose"' "$work/workflow.jsonl" || fail "no workflow name in the captured events"
if grep -q '"workflow":"anonymous-submit"' "$work/workflow.jsonl" "$work/decky.jsonl"; then fail "events of the anonymous submission were published"; fi
if docker exec "$(container_of target-1)" ls /var/lib/wuji/anonymous-was-here >/dev/null 2>&1; then fail "the anonymous command ran on target-1"; fi
after=$(streams) || fail "stream info"
[ "$before" = "$after" ] || fail "streams changed: before: $before; after: $after"
say "    gantry list (operator and viewer): the same $((listed - 1)) workflow(s) as before; no event of it, nothing ran on target-1"
echo "$after" | sed 's/^/    unchanged: /'

say "2c. a secret: {secret: demo_token} from dev/secrets, read by the executor and the health gate"
token=$(cat "$root/dev/secrets/demo_token")
cat >"$work/secret.yaml" <<'YAML'
name: compose-secret
hosts: {t1: {address: target-1:22, user: root}}
formulas:
  - id: s
    server: t1
    nodes:
      - name: use
        run: 'echo "token is $TOKEN"; [ "${#TOKEN}" -gt 8 ]'
        env: {TOKEN: {secret: demo_token}}
    health_gate:
      check: 'echo "gate token $TOKEN"; [ -n "$TOKEN" ]'
      timeout: 20s
      retries: 2
      env: {TOKEN: {secret: demo_token}}
YAML
sub "$work/secret-logs.jsonl" 'decky.t1.logs.>'
sleep 0.5
sid=$("$bin/gantry" submit -q "$work/secret.yaml")
"$bin/gantry" watch "$sid" >"$work/secret-watch.txt" || { cat "$work/secret-watch.txt"; fail "the secret run did not succeed"; }
"$bin/gantry" status "$sid" -o json >"$work/secret-status.json"
sleep 1 # the captures catch up
grep -q 'token is \*\*\*' "$work/secret-logs.jsonl" || fail "no masked output line in nats sub 'decky.t1.logs.>': $(cat "$work/secret-logs.jsonl")"
for f in "$work"/*; do
	if grep -qF "$token" "$f"; then fail "the secret is in $(basename "$f")"; fi
done
if $COMPOSE logs --no-color 2>&1 | grep -qF "$token"; then fail "the secret is in the services' logs"; fi
say "    succeeded; its output line reads 'token is ***'; the token is in no capture, no CLI output, no service log"

say "3a. a delete run takes it apart (reverse order)"
sed 's/^operation: create/operation: delete/' "$example" >"$work/delete.yaml"
del=$("$bin/gantry" submit -q "$work/delete.yaml")
"$bin/gantry" watch "$del" >"$work/watch-del.txt" || { cat "$work/watch-del.txt"; fail "delete run"; }
left=$(docker exec "$(container_of target-2)" ls /var/lib/wuji | wc -l)
[ "$left" = 0 ] || fail "delete run left $left files on target-2"
say "delete run $del succeeded; /var/lib/wuji on target-2 is empty"

say "3b. create again, stop target-2 (worker-0) mid-run"
id2=$("$bin/gantry" submit -q "$example")
check wait "$work/decky.jsonl" "$id2" worker-0-containerd containerd running 60 || fail "worker-0 never started containerd"
say "worker-0-containerd/containerd is running: '$COMPOSE stop target-2'"
$COMPOSE stop -t 1 target-2 2>/dev/null
if "$bin/gantry" watch "$id2" >"$work/watch2.txt"; then fail "run with target-2 stopped reported success"; fi
grep -E 'worker-0|FAILED|failed' "$work/watch2.txt" | tail -8 | sed 's/^/    /'
"$bin/nats" req state.workflow "{\"workflow_id\":\"$id2\"}" --raw >"$work/state2.json" 2>/dev/null
check stopped "$work/state2.json" | sed 's/^/    /' || fail "run 2 state"

say "4. docker start target-2, gantry retry $id2, restart the busy executor mid-run"
$COMPOSE start target-2 2>/dev/null
for _ in $(seq 60); do
	[ "$(docker inspect -f '{{.State.Health.Status}}' "$(container_of target-2)")" = healthy ] && break
	sleep 0.5
done
# The stop may land before or after containerd's command wrote its file
# (it runs 1 s). What the first run recorded and what target-2 holds decide
# what the retry must report: succeeded, when the first run saw it end;
# otherwise skipped when the node's check finds the file, or succeeded when
# the node runs again.
containerd=$(check node "$work/state2.json" worker-0-containerd/containerd)
if [ "$containerd" != succeeded ]; then
	if docker exec "$(container_of target-2)" test -f /var/lib/wuji/containerd; then containerd=skipped; else containerd=succeeded; fi
fi
say "    worker-0-containerd/containerd's file on target-2 before the retry: the retry must report it $containerd"
"$bin/gantry" retry "$id2" | sed 's/^/    /'
busy=$(check wait "$work/decky.jsonl" "$id2" worker-0-containerd containerd-config running 60 --generation 2 --print-source) || fail "retry never reached worker-0-containerd/containerd-config"
cid=${busy#executor/}
cid=${cid%-*}
say "containerd-config is running on executor $busy: docker restart $cid"
docker restart "$cid" >/dev/null
say "executor $cid restarted; waiting for the run"
"$bin/gantry" watch "$id2" >"$work/watch3.txt" || { tail -20 "$work/watch3.txt"; fail "the retried run did not complete after the executor restart"; }
"$bin/nats" req state.workflow "{\"workflow_id\":\"$id2\"}" --raw >"$work/state3.json" 2>/dev/null
check state "$work/state3.json" succeeded "worker-0-containerd/containerd=$containerd" | sed 's/^/    /' || fail "run 3 state"
check restart "$work/decky.jsonl" "$id2" "$cid" | sed 's/^/    /' || fail "run 3 events"
$COMPOSE ps --services --filter status=running 2>/dev/null | tr '\n' ' ' | sed 's/^/    running: /'
echo

say "4b. what nats-server refused: only the client with no credentials (the viewer), never a service or the operator"
viewer=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["no_auth_user"])' "$keys/server.conf")
$COMPOSE logs --no-color nats 2>/dev/null | grep -E 'Violation|authentication error' >"$work/refused.log" || true
others=$(grep -v "\"GANTRY_CLIENTS/nkey:$viewer\"" "$work/refused.log" || true)
[ -z "$others" ] || fail "nats-server refused a service or the operator (a missing permission?):
$others"
grep -o 'Violation - Subject "[^"]*"' "$work/refused.log" | sort | uniq -c | sed 's/^/    viewer: /'

if [ -n "${KEEP:-}" ]; then
	say "compose-test PASS; KEEP=1: the stack is left up (make down removes it)"
	exit 0
fi
say "5. down -v"
$COMPOSE down -v --remove-orphans 2>&1 | tail -3 | sed 's/^/    /'
left=$(docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" | wc -l)
vols=$(docker volume ls -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" | wc -l)
nets=$(docker network ls -q --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" | wc -l)
[ "$left$vols$nets" = 000 ] || fail "left after down: $left containers, $vols volumes, $nets networks"
say "compose-test PASS: nothing left (0 containers, 0 volumes, 0 networks)"
