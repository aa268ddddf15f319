#!/usr/bin/env bash
# `make cluster-chaos`: gantry on the 3-node NATS cluster stack
# (docker-compose.cluster.yml; project, images and ports as in
# docker/cluster-lib.sh) through what a cluster goes through, with 120-node
# runs of the default policy (one attempt per node): 12 formulas x 10 nodes
# over the 3 targets, each node sleeping 1.3 to 1.9 s, then appending a
# marker line "<composition> <formula>/<node> <attempt id>" to
# /var/lib/chaos/<composition>.markers on its target (the attempt id,
# <workflow>.<generation>.create.<formula>.<node>.<attempt>.run, is what the
# durable command's supervisor names its files after), so executions are
# counted from the hosts, not from what gantry says.
#   a. quorum loss: mid-run, 2 of the 3 NATS nodes (the meta leader and
#      another) stopped (docker stop -t 1: lame duck mode cut short, as in a
#      crash) for QUORUM_LOSS seconds (150), then started: the
#      run succeeds, every node succeeded; the services are connected to 2
#      servers or more within SPREAD_BOUND seconds (60); the composition
#      was accepted once; every node ran exactly once (markers); its events
#      in GANTRY_EVENTS hold no event id or message id twice, no node
#      running after it succeeded and no attempt that ended without its
#      running stored; `gantry status` and `gantry state` agree
#      with the stream; `gantry state --rebuild --check` passes; a resubmit
#      of the same composition skips every node (no new marker line)
#   b. partitions: the meta leader, then a node that is not, cut off the
#      compose network (docker network disconnect) for PARTITION seconds
#      (35) each, once every stream and consumer has its replicas current
#      again (up to 90 s): a run submitted during the partition makes progress
#      (seconds to its first node running); 10 `gantry status` calls each
#      answer or fail within their --timeout (3 s) with a message; after
#      healing, the services open fewer than 50 connections in 30 s (from
#      each server's /connz: no reconnect storm) and are connected to at
#      least 2 servers within SPREAD_BOUND seconds; each run succeeds with
#      the checks of a, and a submit that failed created no workflow
#   c. a frozen state-store replica (docker pause for PAUSE seconds, 60):
#      20 `gantry status` calls, one started every 3 s, each answered
#      within its --timeout (5 s)
#   d. the executors ran through it all: same containers, same start
#      time, RestartCount unchanged, still running; no "panic" in any
#      service's log
# Each scenario prints its timeline ([seconds since start | scenario
# +seconds since it began]): what was done and what `gantry status` and
# `gantry watch` showed. Every check is printed PASS or FAIL; the script
# goes on after a failed one and exits 1 at the end if any failed. The
# evidence is always kept in EVIDENCE_DIR (default
# build/cluster-chaos/<time>): the timeline, every container's log, the
# event stream (events.jsonl), status and state documents, the watch
# output, the connection samples and each target's marker and attempt
# files. The stack is removed at the end whatever happened (KEEP=1 leaves
# it up). SCENARIOS=ab runs only those (d always).
set -euo pipefail
# shellcheck source=docker/cluster-lib.sh
. "$(dirname "$0")/cluster-lib.sh"
evidence=${EVIDENCE_DIR:-$root/build/cluster-chaos/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$evidence"
exec > >(tee "$evidence/timeline.txt") 2>&1
QUORUM_LOSS=${QUORUM_LOSS:-150}
PARTITION=${PARTITION:-35}
PAUSE=${PAUSE:-60}
SPREAD_BOUND=${SPREAD_BOUND:-60}
STORM_LIMIT=${STORM_LIMIT:-50}
SCENARIOS=${SCENARIOS:-abc}
NODES=120
net=${COMPOSE_PROJECT_NAME}_default
failures=()
passes=0
declare -A watch_pid=() run_id=()
paused=
cut_off=
id_a=
probe=
sc=setup
sc_t0=$t0_us

# tl: a timeline line, [since start | scenario +since it began]
tl() { printf '[%6ss | %-5s +%5ss] %s\n' "$(secs_since "$t0_us")" "$sc" "$(secs_since "$sc_t0")" "$*"; }
begin() {
	sc=$1 sc_t0=$(now_us)
	echo
	tl "=== $2"
}
# verdict NAME RC DETAIL: a check's PASS (RC 0) or FAIL, with DETAIL's
# first line; its other lines follow, indented
verdict() {
	local head=${3%%$'\n'*} rest=''
	[[ $3 != *$'\n'* ]] || rest=${3#*$'\n'}
	if [ "$2" = 0 ]; then
		passes=$((passes + 1))
		tl "PASS $1${head:+: $head}"
	else
		failures+=("$sc: $1${head:+: $head}")
		tl "FAIL $1${head:+: $head}"
	fi
	[ -z "$rest" ] || indent <<<"$rest"
}
indent() { sed 's/^/      /'; }

# composition NAME: 12 formulas x 10 nodes, formula f on target-(f%3+1),
# the default policy (no retry: one attempt per node)
composition() {
	local f n
	echo "name: $1"
	echo "hosts:"
	for t in 1 2 3; do echo "  t$t: {address: target-$t:22, user: root}"; done
	echo "formulas:"
	for f in $(seq 0 11); do
		echo "  - id: f$f"
		echo "    server: t$((f % 3 + 1))"
		echo "    nodes:"
		for n in $(seq 0 9); do
			echo "      - name: n$n"
			echo "        run: 'sleep 1.$((3 + (f + n) % 7)) && mkdir -p /var/lib/chaos && echo \"$1 f$f/n$n \${_gd##*/}\" >>/var/lib/chaos/$1.markers'"
		done
	done
}

# submit NAME: its workflow id (the composition written to $work/NAME.yaml)
submit() {
	[ -s "$work/$1.yaml" ] || composition "$1" >"$work/$1.yaml"
	"$bin/gantry" submit -q --timeout "${2:-30s}" "$work/$1.yaml"
}

# observe ID: what `gantry status` shows a user now, in one line
observe() {
	local t out rc=0
	t=$(now_us)
	out=$("$bin/gantry" status "$1" -o json --timeout 5s 2>"$work/observe.err") || rc=$?
	if [ $rc = 0 ]; then
		echo "gantry status ($(secs_since "$t") s): $(check_py summary <<<"$out")"
	else
		echo "gantry status: exit $rc after $(secs_since "$t") s: $(head -1 "$work/observe.err" | cut -c1-200)"
	fi
}
# counts ID [TIMEOUT]: "STATUS SUCCEEDED STARTED DONE" (STARTED: nodes past
# pending; DONE: succeeded or skipped), "? 0 0 0" when status does not answer
counts() {
	"$bin/gantry" status "$1" -o json --timeout "${2:-5s}" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
ns = [n["status"] for f in d["formulas"].values() for n in f["nodes"].values()]
print(d["status"], ns.count("succeeded"), sum(1 for s in ns if s != "pending"), ns.count("succeeded") + ns.count("skipped"))' 2>/dev/null || echo "? 0 0 0"
}
# wait_end ID SECS: until the workflow ends (a line of `gantry status`
# every 10 s meanwhile); prints nothing, returns 1 if it did not end
wait_end() {
	local end=$(($(now_us) + $2 * 1000000)) st next=0
	while [ "$(now_us)" -lt "$end" ]; do
		read -r st _ _ _ <<<"$(counts "$1")"
		case $st in succeeded | failed | cancelled) return 0 ;; esac
		if [ "$(now_us)" -ge "$next" ]; then
			tl "  $(observe "$1")"
			next=$(($(now_us) + 10000000))
		fi
		sleep 1
	done
	return 1
}

# remaining T_US SECS: whole seconds left until SECS after T_US
remaining() { echo $((($1 + $2 * 1000000 - $(now_us)) / 1000000)); }

# ensure_probe: probe, the workflow the status calls of b and c ask
# about: chaos-a's run, else a one-node run made for it
ensure_probe() {
	[ -z "$probe" ] || return 0
	probe=$id_a
	[ -z "$probe" ] || return 0
	printf '%s\n' "name: chaos-probe" "hosts: {t1: {address: target-1:22, user: root}}" \
		"formulas: [{id: f0, server: t1, nodes: [{name: n0, run: 'true'}]}]" >"$work/chaos-probe.yaml"
	probe=$("$bin/gantry" submit -q "$work/chaos-probe.yaml") || probe=none
	wait_end "$probe" 60 || true
	tl "probe workflow for the status calls: $probe"
}

# stamp: each line with the seconds since the start
stamp() {
	local l
	while IFS= read -r l; do printf '[%6ss] %s\n' "$(secs_since "$t0_us")" "$l"; done
}
# watch_start ID LABEL: gantry watch in the background, into
# $evidence/watch-LABEL.txt, each line stamped
watch_start() {
	timeout 900 "$bin/gantry" watch "$1" > >(stamp >"$evidence/watch-$2.txt") 2>&1 &
	watch_pid[$2]=$!
}
watch_last() { grep -v '^\[ *[0-9.]*s\] *$' "$evidence/watch-$1.txt" 2>/dev/null | tail -1 | cut -c1-160; }
# watch_end LABEL: waits (at most 20 s) for the watch to end; says how
watch_end() {
	local p=${watch_pid[$1]:-} rc=0 i
	[ -n "$p" ] || return 0
	for i in $(seq 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
	if kill -0 "$p" 2>/dev/null; then
		kill "$p" 2>/dev/null || true
		tl "  gantry watch had not ended 20 s after the run; stopped it"
	fi
	wait "$p" 2>/dev/null || rc=$?
	unset "watch_pid[$1]"
	tl "  gantry watch exited $rc; its last line: $(watch_last "$1")"
}

# markers NAME: every target's marker lines of NAME, into $work/NAME.m<t>
markers() {
	local t c
	for t in 1 2 3; do
		c=$(ids target-$t)
		: >"$work/$1.m$t"
		if [ -n "$c" ]; then docker exec "$c" cat "/var/lib/chaos/$1.markers" >"$work/$1.m$t" 2>/dev/null || true; fi
	done
	cat "$work/$1.m1" "$work/$1.m2" "$work/$1.m3" | wc -l
}
check_markers() { # check_markers NAME IDS (comma-separated)
	markers "$1" >/dev/null
	check_py markers "$1" "$2" "$NODES" "$work/$1.m1" "$work/$1.m2" "$work/$1.m3"
}

# status_calls ID N EVERY TIMEOUT OUT: N `gantry status` calls, one started
# every EVERY seconds whether the ones before ended or not; a line each in
# OUT: "<n> <exit> <seconds> <first line of stderr>"
status_calls() {
	local i start wait_us pids=()
	start=$(now_us)
	mkdir -p "$5.d"
	for i in $(seq "$2"); do
		wait_us=$((start + (i - 1) * $3 * 1000000 - $(now_us)))
		[ "$wait_us" -le 0 ] || sleep "$((wait_us / 1000000)).$(printf '%06d' $((wait_us % 1000000)))"
		status_call "$1" "$4" "$i" "$5.d/$i" &
		pids+=($!)
	done
	wait "${pids[@]}" || true
	sort -n "$5.d"/*.line >"$5"
	rm -rf "$5.d"
}
status_call() { # status_call ID TIMEOUT N FILE: one call, its line in FILE.line
	local t rc=0
	t=$(now_us)
	"$bin/gantry" status "$1" -o json --timeout "${2}s" >/dev/null 2>"$4.err" || rc=$?
	printf '%s %s %s %s\n' "$3" "$rc" "$(secs_since "$t")" "$(head -1 "$4.err" | tr -s ' ' | cut -c1-200)" >"$4.line"
}

# judge_calls OUT TIMEOUT STRICT: 0 when every call answered (STRICT=1), or
# answered or failed with a message (STRICT=0), within TIMEOUT + 1 s (the
# process's own start and connect)
judge_calls() {
	python3 - "$@" <<'PY'
import sys
path, to, strict = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "1"
calls = [l.rstrip("\n").split(" ", 3) for l in open(path) if l.strip()]
bad, durs, ok = [], [], 0
for c in calls:
    n, rc, secs, msg = c[0], c[1], float(c[2]), (c[3] if len(c) > 3 else "")
    durs.append(secs)
    if rc == "0":
        ok += 1
    fine = secs <= to + 1 and (rc == "0" or (not strict and msg and "panic" not in msg and "goroutine" not in msg))
    if not fine:
        bad.append(f"call {n}: exit {rc} after {secs} s{': ' + msg if msg else ''}")
msgs = sorted({c[3] for c in calls if len(c) > 3 and c[1] != "0"})
print(f"{ok}/{len(calls)} answered, slowest {max(durs or [0])} s, durations {' '.join(c[2] for c in calls)}")
for m in msgs[:3]:
    print(f"  message: {m}")
for b in bad[:5]:
    print(f"  PROBLEM: {b}")
if len(bad) > 5:
    print(f"  ... and {len(bad) - 5} more")
sys.exit(1 if bad or not calls else 0)
PY
}

# conns SINCE_US UNTIL_US: the services' connections per server now, and
# those opened between the two times (see cluster_check.py conns)
conns() { check_py conns "$(($1 / 1000000))" "$(($2 / 1000000))" "${monitor_ports[@]}"; }
field() { python3 -c 'import json, sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"; }

# executors: the executor containers as docker sees them: id, name,
# RestartCount, start time, state
executors() {
	local c
	for c in $(docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" --filter "label=com.docker.compose.service=executor"); do
		docker inspect -f '{{.Id}} {{.Name}} restarts={{.RestartCount}} started={{.State.StartedAt}} {{.State.Status}}' "$c"
	done | sort
}

# events_of NAME: the stream into $evidence/events-NAME.jsonl; the ids of
# the workflows of NAME in it, comma-separated
events_of() {
	local out rc=0
	out=$(dump_events "$evidence/events-$1.jsonl" 2>&1) || rc=$?
	[ $rc = 0 ] || tl "  reading the stream: $out" >&2
	check_py workflows "$evidence/events-$1.jsonl" "$1"
}

# check_run ID NAME SUBMITTED: the workflows of NAME in the stream (only
# SUBMITTED, the one whose id submit printed: a submit that failed created
# none), markers, the stream, status and state, the rebuild check
check_run() {
	local id=$1 name=$2 submitted=$3 out rc wfs w
	wfs=$(events_of "$name")
	verdict "$name was accepted once, by the submit that printed its id (a failed submit created no workflow)" "$([ "$wfs" = "$submitted" ] && echo 0 || echo 1)" \
		"workflows of $name: ${wfs:-none} (the submit printed: ${submitted:-none})"
	[ -n "$wfs" ] || wfs=$id
	rc=0
	out=$(check_markers "$name" "$wfs") || rc=$?
	verdict "every node of $name ran exactly once (markers on the targets)" $rc "$out"
	for w in ${wfs//,/ }; do
		rc=0
		out=$(check_py stream "$evidence/events-$name.jsonl" "$w") || rc=$?
		verdict "the stream holds no event of $w twice, no node running after it succeeded, no attempt ended without its running" $rc "$out"
	done
	"$bin/gantry" status "$id" -o json >"$evidence/status-$name.json" 2>&1 || true
	"$bin/gantry" state -o json >"$evidence/state-$name.json" 2>&1 || true
	rc=0
	out=$(check_py agree "$evidence/status-$name.json" "$evidence/state-$name.json" "$evidence/events-$name.jsonl" "$id" "$name") || rc=$?
	verdict "gantry status and gantry state agree with the stream" $rc "$out"
	rc=0
	out=$("$bin/gantry" state --rebuild --check --timeout 60s 2>&1) || rc=$?
	verdict "gantry state --rebuild --check" $rc "$(tail -3 <<<"$out")"
}

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
	local p
	set +e
	for p in "${watch_pid[@]}"; do kill "$p" 2>/dev/null; done
	[ -z "$paused" ] || docker unpause "$paused" >/dev/null 2>&1
	[ -z "$cut_off" ] || docker network connect "$net" "$cut_off" >/dev/null 2>&1
	if [ ! -e "$evidence/logs" ] && [ -n "$(all_ids)" ]; then
		keep_logs "$evidence"
		keep_targets "$evidence"
	fi
	cluster_remove
	rm -rf "$work"
	say "evidence: $evidence"
}
trap cleanup EXIT

# setup: the stack from nothing, the executors as they start
setup() {
	say "cluster-chaos: $COMPOSE_PROJECT_NAME; scenarios $SCENARIOS; quorum loss ${QUORUM_LOSS}s, partitions ${PARTITION}s, pause ${PAUSE}s; evidence in $evidence"
	if ! cluster_start; then
		say "FAIL: the stack did not come up"
		exit 1
	fi
	leader=$(check_py wait-leader 60 "${monitor_ports[@]}") || leader=none
	say "    meta leader: $leader"
	executors >"$evidence/executors-before.txt"
	restarts >"$evidence/restarts-before.txt"
}

# restarts: every container's RestartCount, "name=N" sorted
restarts() {
	local c
	for c in $(all_ids); do echo "$(cname "$c")=$(docker inspect -f '{{.RestartCount}}' "$c")"; done | sort
}

# ---------------------------------------------------------------- a
scenario_a() {
	local leader other t_stop t_start nl st ndone started fin n0 n1 m0 id2 rc out next answer more ran
	begin a "quorum loss: 2 of 3 NATS nodes stopped for ${QUORUM_LOSS}s mid-run"
	id_a=$(submit chaos-a) || {
		verdict "submit chaos-a" 1
		return
	}
	tl "submitted chaos-a ($NODES nodes, default policy): $id_a"
	watch_start "$id_a" a
	for _ in $(seq 120); do
		read -r st ndone started fin <<<"$(counts "$id_a")"
		[ "$ndone" -ge 20 ] && break
		case $st in succeeded | failed | cancelled) break ;; esac
		sleep 0.5
	done
	tl "$(observe "$id_a")"
	leader=$(meta_leader) || leader=nats-1
	for other in nats-1 nats-2 nats-3; do [ "$other" = "$leader" ] || break; done
	read -r st n0 started fin <<<"$(counts "$id_a")"
	m0=$(markers chaos-a)
	tl "stop $leader (the meta leader) and $other: quorum lost ($n0 nodes succeeded, $m0 marker lines)"
	t_stop=$(now_us)
	$COMPOSE stop -t 1 "$leader" "$other" >/dev/null 2>&1 || tl "  compose stop failed"
	next=0
	while [ "$(secs_since "$t_stop" | cut -d. -f1)" -lt "$QUORUM_LOSS" ]; do
		if [ "$(now_us)" -ge "$next" ]; then
			next=$(($(now_us) + 15000000))
			tl "  $(observe "$id_a"); watch: $(watch_last a); marker lines on the targets: $(markers chaos-a)"
		fi
		sleep 1
	done
	m0=$(markers chaos-a)
	tl "start $leader and $other ($(secs_since "$t_stop") s after the stop); marker lines so far: $(markers chaos-a)"
	t_start=$(now_us)
	$COMPOSE start "$leader" "$other" >/dev/null 2>&1 || tl "  compose start failed"
	if nl=$(check_py wait-leader 120 "${monitor_ports[@]}"); then
		tl "  meta leader $nl, $(secs_since "$t_start") s after the start"
	else
		tl "  no meta leader that all three agree on $(secs_since "$t_start") s after the start"
	fi
	# what a user sees come back: status answering, a node succeeding
	# (over the count before the stop), a command run on a target
	answer='' more='' ran=''
	for _ in $(seq 240); do
		read -r st n1 started fin <<<"$(counts "$id_a")"
		[ -n "$answer" ] || [ "$st" = "?" ] || answer="$(secs_since "$t_start") s ($n1 succeeded)"
		[ -n "$more" ] || [ "$n1" -le "$n0" ] || more=$(secs_since "$t_start")
		[ -n "$ran" ] || [ "$(markers chaos-a)" -le "$m0" ] || ran=$(secs_since "$t_start")
		[ -z "$answer" ] || [ -z "$more" ] || [ -z "$ran" ] || break
		case $st in succeeded | failed | cancelled) break ;; esac
		sleep 0.5
	done
	tl "  after the start: gantry status answered at ${answer:-never}, more nodes succeeded than before the stop at ${more:-never} s, a new marker line at ${ran:-never} s"
	wait_end "$id_a" 300 || true
	read -r st ndone started fin <<<"$(counts "$id_a")"
	tl "run chaos-a: $st, $ndone/$NODES succeeded, $(secs_since "$t_start") s after the start"
	watch_end a
	verdict "the run succeeded, every node succeeded" "$([ "$st" = succeeded ] && [ "$ndone" = "$NODES" ] && echo 0 || echo 1)" "$st, $ndone/$NODES nodes succeeded"
	spread_check "of the quorum's return" "$t_start"
	check_run "$id_a" chaos-a "$id_a"
	markers chaos-a >/dev/null
	cat "$work/chaos-a.m1" "$work/chaos-a.m2" "$work/chaos-a.m3" >"$work/chaos-a.before"
	# the same composition again: every node already succeeded with its spec
	id2=$(submit chaos-a) || {
		verdict "resubmit chaos-a" 1
		return
	}
	tl "resubmitted chaos-a: $id2"
	wait_end "$id2" 180 || true
	"$bin/gantry" status "$id2" -o json >"$evidence/status-chaos-a-resubmit.json" 2>&1 || true
	out=$(check_py summary "$evidence/status-chaos-a-resubmit.json")
	tl "  resubmit: $out"
	rc=1
	[[ $out == "succeeded 0/$NODES succeeded, 0 running, $NODES skipped, 0 failed" ]] && rc=0
	verdict "the resubmit skipped every node" $rc "$out"
	n1=$(markers chaos-a)
	verdict "the resubmit ran nothing on the targets" "$([ "$n1" = "$(wc -l <"$work/chaos-a.before")" ] && echo 0 || echo 1)" "$((n1 - $(wc -l <"$work/chaos-a.before"))) new marker lines"
}

# ---------------------------------------------------------------- b
# partition ROLE NODE NAME: NODE cut off the compose network for
# PARTITION s (healed on time by a timer, whatever the checks wait for)
# while NAME is submitted and status is asked; then the services'
# connections after healing
partition() {
	local role=$1 node=$2 name=$3 c cur t_p t_h t_sub='' id='' st ndone started fin rc out s0 n first='' spread='' calls healer to tries=0
	c=$(ids "$node")
	# A partition of one node of a healthy cluster: a replica still
	# catching up from the scenario before (seen for 45 s after a
	# partition healed) would make the cut a loss of two for its stream,
	# which stalls it by design.
	if cur=$(check_py wait-current 90 "${monitor_ports[@]}"); then
		tl "every stream and consumer has a leader and its replicas current (waited ${cur} s)"
	else
		tl "cutting off all the same: $cur"
	fi
	conns "$(now_us)" "$(now_us)" >"$work/conns.json"
	tl "before: services on $(field services_on <"$work/conns.json")"
	tl "partition $node ($role): docker network disconnect"
	t_p=$(now_us)
	docker network disconnect "$net" "$c"
	cut_off=$c
	(
		sleep "$PARTITION"
		docker network connect --alias "$node" "$net" "$c"
		now_us >"$work/healed"
	) &
	healer=$!
	status_calls "$probe" 10 3 3 "$evidence/calls-$name.txt" &
	calls=$!
	while [ -z "$id" ] && [ "$(remaining "$t_p" "$PARTITION")" -gt 1 ]; do
		tries=$((tries + 1))
		to=$(remaining "$t_p" "$PARTITION")
		[ "$to" -le 10 ] || to=10
		t_sub=$(now_us)
		if id=$(submit "$name" "${to}s" 2>"$work/submit.err"); then
			tl "  submitted $name: $id (try $tries, $(secs_since "$t_sub") s)"
		else
			tl "  submit (try $tries) failed after $(secs_since "$t_sub") s: $(head -1 "$work/submit.err" | cut -c1-200)"
			id=
			# a submit refused at once is tried again 3 s after the one before
			while [ "$(now_us)" -lt $((t_sub + 3000000)) ]; do sleep 0.2; done
		fi
	done
	if [ -n "$id" ]; then
		run_id[$name]=$id
		while [ "$(remaining "$t_p" "$PARTITION")" -gt 0 ]; do
			read -r st ndone started fin <<<"$(counts "$id" 2s)"
			if [ "$started" -gt 0 ] && [ "$(remaining "$t_p" "$PARTITION")" -ge 0 ]; then
				first=$(secs_since "$t_sub")
				break
			fi
			sleep 0.5
		done
		tl "  $(observe "$id")"
	fi
	verdict "a run submitted during the partition progresses" "$([ -n "$first" ] && echo 0 || echo 1)" \
		"$(if [ -n "$first" ]; then echo "first node running $first s after the submit (accepted at try $tries)"; elif [ -n "$id" ]; then echo "no node started during the ${PARTITION} s partition (accepted at try $tries)"; else echo "no node started during the ${PARTITION} s partition ($tries submits failed)"; fi)"
	wait "$healer" || tl "  docker network connect failed"
	cut_off=
	t_h=$(cat "$work/healed" 2>/dev/null || now_us)
	tl "healed $node ($(((t_h - t_p) / 100000 / 10)).$(((t_h - t_p) / 100000 % 10)) s after the cut): docker network connect"
	wait "$calls" || true
	rc=0
	out=$(judge_calls "$evidence/calls-$name.txt" 3 0) || rc=$?
	verdict "10 gantry status calls during the partition answered or failed within --timeout 3s" $rc "$out"
	# the 30 s after healing: the run's first node (if none ran yet), the
	# services' connections (every 5 s) and how they spread
	s0=$(conns "$t_h" "$t_h" | field total_connections)
	next=0
	while [ "$(remaining "$t_h" 30)" -gt 0 ] || { [ -n "$id" ] && [ -z "$first" ] && [ "$(remaining "$t_h" 90)" -gt 0 ]; }; do
		if [ -n "$id" ] && [ -z "$first" ]; then
			read -r st ndone started fin <<<"$(counts "$id" 2s)"
			if [ "$started" -gt 0 ]; then
				first=$(secs_since "$t_sub")
				tl "  $name: first node running $first s after the submit, $(secs_since "$t_h") s after healing"
			fi
		fi
		if [ "$(now_us)" -ge "$next" ] && [ "$(remaining "$t_h" 30)" -gt 0 ]; then
			next=$(($(now_us) + 5000000))
			conns "$t_h" "$(now_us)" >"$work/conns.json"
			cat "$work/conns.json" >>"$evidence/conns-$name.jsonl"
			tl "  services on $(field services_on <"$work/conns.json"); opened since healing: $(field service_connections_started <"$work/conns.json")"
			if [ -z "$spread" ] && [ "$(field servers_with_services <"$work/conns.json")" -ge 2 ]; then spread=$(secs_since "$t_h"); fi
		fi
		sleep 1
	done
	[ -z "$id" ] || [ -n "$first" ] || tl "  $name: no node running 90 s after healing"
	conns "$t_h" "$((t_h + 30000000))" >"$work/conns.json"
	n=$(field service_connections_started <"$work/conns.json")
	verdict "no reconnect storm after healing" "$([ "$n" -lt "$STORM_LIMIT" ] && echo 0 || echo 1)" \
		"$n service connections opened in the 30 s after healing (limit $STORM_LIMIT; closed: $(field closed_reasons <"$work/conns.json")); all clients' connections since healing $(($(field total_connections <"$work/conns.json") - s0)) (health checks and CLI calls included)"
	spread_check "of healing" "$t_h" "$spread"
}

# spread_check WHAT SINCE_US [SPREAD]: the services are connected to 2
# servers or more within SPREAD_BOUND s of SINCE_US (SPREAD: when they were
# seen so already)
spread_check() {
	local spread=${3:-}
	while [ -z "$spread" ]; do
		conns "$2" "$(now_us)" >"$work/conns.json"
		if [ "$(field servers_with_services <"$work/conns.json")" -ge 2 ]; then
			spread=$(secs_since "$2")
		elif [ "$(secs_since "$2" | cut -d. -f1)" -ge "$SPREAD_BOUND" ]; then
			break
		else
			sleep 2
		fi
	done
	verdict "services connected to 2 servers or more within ${SPREAD_BOUND} s $1" "$([ -n "$spread" ] && echo 0 || echo 1)" \
		"${spread:+seen $spread s after: }$(field services_on <"$work/conns.json")"
}

scenario_b() {
	local l cut node='' n st ndone started fin name id
	begin b "partitions: the meta leader, then a node that is not, cut off for ${PARTITION}s each"
	ensure_probe
	cut=$(meta_leader) || cut=nats-1
	partition "meta leader" "$cut" chaos-b1
	l=$(check_py wait-leader 60 "${monitor_ports[@]}") || l=$(meta_leader) || l=nats-1
	tl "meta leader now: $l"
	# not the leader, and another node than the one cut off before if it can
	for n in nats-1 nats-2 nats-3; do [ "$n" = "$l" ] || [ "$n" = "$cut" ] || node=${node:-$n}; done
	for n in nats-1 nats-2 nats-3; do [ "$n" = "$l" ] || node=${node:-$n}; done
	partition "not the meta leader" "$node" chaos-b2
	for name in chaos-b1 chaos-b2; do
		id=${run_id[$name]:-}
		if [ -z "$id" ]; then
			# no submit printed an id: did one create a workflow anyway?
			id=$(events_of "$name")
			id=${id%%,*}
			if [ -z "$id" ]; then
				verdict "the failed submits of $name created no workflow" 0 "none in the stream"
				continue
			fi
			tl "  a submit of $name that failed created workflow $id"
		fi
		wait_end "$id" 120 || true
		read -r st ndone started fin <<<"$(counts "$id")"
		verdict "run $name succeeded, every node succeeded or skipped" "$([ "$st" = succeeded ] && [ "$fin" = "$NODES" ] && echo 0 || echo 1)" "$st, $ndone/$NODES nodes succeeded, $((fin - ndone)) skipped (run by another workflow of $name)"
		check_run "$id" "$name" "${run_id[$name]:-}"
	done
}

# ---------------------------------------------------------------- c
scenario_c() {
	local c rc out t calls
	begin c "a frozen state-store replica: docker pause for ${PAUSE}s"
	ensure_probe
	c=$(ids state-store | head -1)
	t=$(now_us)
	docker pause "$c" >/dev/null
	paused=$c
	tl "paused state-store $(cname "$c"); 20 gantry status calls, 3 s apart, --timeout 5s"
	status_calls "$probe" 20 3 5 "$evidence/calls-frozen.txt" &
	calls=$!
	while [ "$(remaining "$t" "$PAUSE")" -gt 0 ]; do sleep 0.2; done
	docker unpause "$c" >/dev/null
	paused=
	tl "unpaused ($(secs_since "$t") s after the pause)"
	wait "$calls" || true
	rc=0
	out=$(judge_calls "$evidence/calls-frozen.txt" 5 1) || rc=$?
	verdict "20 gantry status calls answered within --timeout 5s while a state-store replica was frozen" $rc "$out"
}

# ---------------------------------------------------------------- d
scenario_d() {
	local rc out lines
	begin d "the executors ran through every scenario"
	executors >"$evidence/executors-after.txt"
	sed 's/^[0-9a-f]* //' "$evidence/executors-after.txt" | while read -r l; do tl "  $l"; done
	rc=0
	cmp -s "$evidence/executors-before.txt" "$evidence/executors-after.txt" || rc=1
	grep -q ' running$' "$evidence/executors-after.txt" || rc=1
	[ "$(grep -c ' running$' "$evidence/executors-after.txt")" = "$(wc -l <"$evidence/executors-before.txt")" ] || rc=1
	verdict "no executor exited or restarted (same containers, start times and RestartCount, running)" $rc \
		"$(diff "$evidence/executors-before.txt" "$evidence/executors-after.txt" | grep '^[<>]' | sed 's/^\(.\) [0-9a-f]* /\1 /' | tr '\n' ' ')"
	restarts >"$evidence/restarts-after.txt"
	tl "  restarts (RestartCount) of every container: $(tr '\n' ' ' <"$evidence/restarts-after.txt"); during the scenarios: $(diff "$evidence/restarts-before.txt" "$evidence/restarts-after.txt" | sed -n 's/^> //p' | tr '\n' ' ' | grep . || echo none)"
	keep_logs "$evidence"
	keep_targets "$evidence"
	rc=0
	out=$(grep -il panic "$evidence"/logs/{planner,executor,health-gate,state-store}_*.log 2>/dev/null | xargs -r -n1 basename | tr '\n' ' ') || true
	[ -z "$out" ] || rc=1
	lines=$(grep -ih -m2 panic "$evidence"/logs/{planner,executor,health-gate,state-store}_*.log 2>/dev/null | cut -c1-300) || true
	verdict "no panic in any service's log" $rc "$out${lines:+$'\n'$lines}"
	dump_events "$evidence/events.jsonl" >/dev/null 2>&1 || true
}

# The whole script is read before anything runs (main is called on its
# last line, with the exit on the same line), so editing it meanwhile
# changes nothing of a run.
main() {
	setup
	[[ $SCENARIOS != *a* ]] || scenario_a
	[[ $SCENARIOS != *b* ]] || scenario_b
	[[ $SCENARIOS != *c* ]] || scenario_c
	scenario_d
	echo
	say "cluster-chaos: $passes checks passed, ${#failures[@]} failed"
	for f in "${failures[@]}"; do say "  FAIL $f"; done
	[ "${#failures[@]}" = 0 ]
}

main "$@"; exit
