#!/usr/bin/env bash
# `make cluster-test`: gantry on a 3-node NATS cluster (docker-compose.cluster.yml,
# in its own compose project, CLUSTER_PROJECT_NAME, by default
# "${COMPOSE_PROJECT_NAME:-gantry}-cluster": the `make up` stack is never
# touched; see docker/cluster-lib.sh for the images and ports).
#   1. from nothing: down -v, cluster-up (R3 streams and KV, 2 replicas of
#      every service), services answering
#   2. a 100-node run (10 formulas x 10 nodes over the 3 targets; each node
#      appends a marker line "<formula>/<node>" to /var/lib/wuji/markers on
#      its target)
#   3. mid-run: the JetStream meta leader (asked of each node's monitoring
#      endpoint, /jsz: meta_cluster.leader) is stopped; one replica of each
#      service is killed (docker kill; of the executors, the one whose log
#      names the workflow most: the one running nodes); later the stopped
#      node is started again
#   4. the run succeeded; every node's marker line is on its target exactly
#      once (no node ran again after success); `gantry state --rebuild --check`
#      finds the projection equal to a rebuild from the event stream, and
#      nothing wrong in the stream itself (no event stored twice, no
#      transition out of order, no node its executor recorded otherwise)
#   5. down -v
# ATTEMPTS=N allows each node N attempts (default 1: any failed attempt
# fails the run). KEEP=1 leaves the stack up. Prints the timings of each step. When a check
# fails, the evidence is kept in EVIDENCE_DIR (default
# build/cluster-test/<date>): the workflow's events from the stream
# (events.jsonl, and as `gantry watch` prints them), its status (the failed
# nodes' errors), the node records, the attempt files and marker lines on
# each target, and each service's and nats-server's logs.
set -euo pipefail
# shellcheck source=docker/cluster-lib.sh
. "$(dirname "$0")/cluster-lib.sh"
evidence=${EVIDENCE_DIR:-$root/build/cluster-test/$(date -u +%Y%m%dT%H%M%SZ)}
id=

# keep_evidence: what a failure is read from, into $evidence.
keep_evidence() {
	keep_logs "$evidence"
	if [ -n "$id" ]; then
		echo "$id" >"$evidence/workflow_id"
		"$bin/gantry" status "$id" >"$evidence/status.txt" 2>&1 || true
		"$bin/gantry" status "$id" -o json >"$evidence/status.json" 2>&1 || true
		timeout 30 "$bin/gantry" watch "$id" >"$evidence/watch.txt" 2>&1 || true
		# every event of the stream, as stored
		dump_events "$evidence/events.jsonl" >"$evidence/events.txt" 2>&1 || true
		# the executor's node records (attempts, status) of the workflow
		nats_as executor kv ls gantry_nodes 2>/dev/null | grep "^$id" | while read -r k; do
			printf '%s %s\n' "$k" "$(nats_as executor kv get gantry_nodes "$k" --raw 2>/dev/null)"
		done >"$evidence/node-records.txt" 2>&1 || true
	fi
	keep_targets "$evidence"
	say "    evidence kept in $evidence"
}
fail() {
	say "FAIL: $*"
	keep_evidence
	$COMPOSE ps || true
	$COMPOSE logs --no-color --tail 20 2>&1 | tail -150 || true
	exit 1
}
cleanup() {
	cluster_remove
	rm -rf "$work"
}
trap cleanup EXIT

say "1. from nothing: $COMPOSE_PROJECT_NAME down -v, cluster-up"
cluster_start || fail "the stack did not come up"
say "    meta leader: $(meta_leader)"

# The composition: 10 formulas x 10 nodes, formula f on target-(f%3+1); a
# node sleeps 1.3 to 1.9 s, then appends its marker line.
{
	echo "name: cluster-100"
	echo "operation: create"
	echo "retry: {max_attempts: ${ATTEMPTS:-1}, initial_interval: 500ms}"
	echo "hosts:"
	for t in 1 2 3; do echo "  t$t: {address: target-$t:22, user: root}"; done
	echo "formulas:"
	for f in $(seq 0 9); do
		echo "  - id: f$f"
		echo "    server: t$((f % 3 + 1))"
		echo "    nodes:"
		for n in $(seq 0 9); do
			echo "      - name: n$n"
			echo "        run: sleep 1.$((3 + (f + n) % 7)) && mkdir -p /var/lib/wuji && echo f$f/n$n >> /var/lib/wuji/markers"
		done
	done
} >"$work/c100.yaml"

say "2. submit the 100-node run"
id=$("$bin/gantry" submit -q "$work/c100.yaml") || fail "submit"
say "    workflow $id"
for _ in $(seq 60); do
	read -r st done <<<"$(status_of "$id")"
	[ "${done:-0}" != "?" ] && [ "${done:-0}" -ge 15 ] && break
	sleep 0.5
done
leader=$(meta_leader) || fail "no meta leader"
say "3a. $done nodes done ($st): stop the meta leader $leader"
t_stop=$EPOCHREALTIME
$COMPOSE stop -t 1 "$leader" 2>&1 | grep -v '^$' | sed 's/^/    /' || true
for _ in $(seq 60); do
	nl=$(meta_leader) && [ "$nl" != "$leader" ] && break
	sleep 0.5
done
say "    new meta leader: ${nl:-none} ($(awk -v a="$EPOCHREALTIME" -v b="$t_stop" 'BEGIN { printf "%.1f", a - b }') s after the stop); run: $(status_of "$id")"
# busiest SERVICE: the replica whose log names the workflow most often (the
# executor running most of its nodes), else the first.
busiest() {
	local c best= most=-1 k
	for c in $(ids "$1"); do
		k=$(docker logs "$c" 2>&1 | grep -c "$id" || true)
		if [ "$k" -gt "$most" ]; then best=$c most=$k; fi
	done
	echo "$best"
}
say "3b. docker kill one replica of each service (the executor running most of the nodes)"
for s in planner executor health-gate state-store; do
	c=$(busiest $s)
	[ -n "$c" ] || fail "no $s running"
	docker kill "$c" >/dev/null
	say "    killed $s $c"
done
sleep 5
say "    run: $(status_of "$id")"
say "3c. start $leader again"
$COMPOSE start "$leader" 2>&1 | grep -v '^$' | sed 's/^/    /' || true
t_sub=$EPOCHREALTIME
for _ in $(seq 240); do
	read -r st done <<<"$(status_of "$id")"
	case $st in succeeded | failed | cancelled | stopped) break ;; esac
	sleep 1
done
say "4. run $id: $st, $done/100 nodes succeeded ($(awk -v a="$EPOCHREALTIME" -v b="$t_sub" 'BEGIN { printf "%.1f", a - b }') s after the restart)"
[ "$st" = succeeded ] || { "$bin/gantry" status "$id" 2>&1 | grep -iv "succeeded" | head -20; fail "run ended $st"; }
sleep 2
dups=0
lines=0
for t in 1 2 3; do
	c=$(ids target-$t)
	docker exec "$c" cat /var/lib/wuji/markers >"$work/markers-$t" || fail "no markers on target-$t"
	lines=$((lines + $(wc -l <"$work/markers-$t")))
	d=$(sort "$work/markers-$t" | uniq -d | wc -l)
	dups=$((dups + d))
	say "    target-$t: $(wc -l <"$work/markers-$t") marker lines, $(sort -u "$work/markers-$t" | wc -l) distinct, $d repeated"
done
[ "$lines" = 100 ] && [ "$dups" = 0 ] || fail "$lines marker lines, $dups repeated: a node ran twice or not at all"
say "    100 marker lines, each node exactly once"
"$bin/gantry" state --rebuild --check >"$work/check.txt" 2>&1 || { cat "$work/check.txt"; fail "the projection differs from the stream, or the stream has problems (listed above)"; }
sed 's/^/    /' "$work/check.txt" | tail -5
say "    restarts (docker RestartCount): $(for c in $(all_ids); do echo "$(cname "$c")=$(docker inspect -f '{{.RestartCount}}/{{.State.Status}}' "$c")"; done | sort | tr '\n' ' ')"
say "    meta leader now: $(meta_leader); running: $($COMPOSE ps --services --filter status=running | tr '\n' ' ')"
# What the services' logs say they did about it (killed replicas' logs included).
for c in $(docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME"); do docker logs "$c" 2>&1; done >"$work/all.log"
n() { grep -c "$1" "$work/all.log" || true; }
say "    logs: $(n 'cannot create the streams and buckets yet') start retries, $(grep '"formula finished"' "$work/all.log" | grep -c "$id" || true) formula runs (10 formulas), $(n 'handler failed; redelivering') handlers failed and redelivered, $(n 'resuming an interrupted attempt') attempts resumed, $(n 're-attaching to it') SSH re-attaches, $(n 'cannot take a slot yet') slot retries, $(n 'wrong last seq') projection write conflicts"
grep -h -e 'cannot take a slot yet' -e 're-attaching to it' "$work/all.log" | head -3 | cut -c1-400 | sed 's/^/      /' || true
if [ -n "${KEEP:-}" ]; then
	say "cluster-test PASS; KEEP=1: the stack is left up (make cluster-down removes it)"
	exit 0
fi
say "5. down -v"
$COMPOSE down -v --remove-orphans >/dev/null 2>&1
say "cluster-test PASS"
