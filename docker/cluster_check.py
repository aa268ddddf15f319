#!/usr/bin/env python3
"""Checks for docker/cluster-test.sh and docker/cluster-chaos.sh.

  dump IN OUT                  `nats sub --stream --dump=-` (NUL-separated) to
                               JSON lines: seq, subject, msg_id, event
  stream EVENTS ID             the workflow's events: no event id or message id
                               stored twice, no node running after it succeeded,
                               no attempt ended without its running stored
  markers NAME IDS N FILE...   marker lines "NAME f/n ATTEMPT": N nodes, each once,
                               by one of the workflows IDS (comma-separated)
  workflows EVENTS NAME        the ids of the workflows of composition NAME accepted
  agree STATUS STATE EVENTS ID NAME
                               gantry status and the workflow's events agree, and
                               gantry state and the composition's last events
  summary [STATUS]             one line of a `gantry status -o json` document
  leader PORT...               the JetStream meta leader (/jsz of each monitor port)
  conns SINCE UNTIL PORT...    the services' connections per server now, and
                               those started between SINCE and UNTIL (unix s)
  wait-leader SECS PORT...     until a meta leader is known by every port
  wait-current SECS PORT...    until every stream and consumer (but the
                               system account's) has a leader and all its replicas
                               current, as its leader sees them: prints the
                               seconds it took, or what is not current

Exit status 1 when a check finds a problem, after printing it.
"""
import base64
import gzip
import json
import sys
import time
import urllib.request
from collections import Counter, defaultdict
from datetime import datetime

SERVICES = ("gantry-planner", "gantry-executor", "gantry-health-gate", "gantry-state-store")


def dump(src, dst):
    raw = open(src, "rb").read()
    n = bad = 0
    with open(dst, "w") as out:
        for i, chunk in enumerate(raw.split(b"\0")):
            if not chunk.strip():
                continue
            try:
                m = json.loads(chunk)
                data = base64.b64decode(m.get("Data") or "")
                if data[:2] == b"\x1f\x8b":
                    data = gzip.decompress(data)
                ev = json.loads(data)
            except (ValueError, OSError) as e:
                bad += 1
                print(f"message {i}: not an event: {e}", file=sys.stderr)
                continue
            reply = (m.get("Reply") or "").split(".")
            # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>... (v1), or
            # $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<stream seq>... (v2)
            seq = int(reply[5]) if len(reply) == 9 else int(reply[7]) if len(reply) >= 11 else i + 1
            hdr = m.get("Header") or {}
            out.write(json.dumps({"seq": seq, "subject": m.get("Subject"), "msg_id": (hdr.get("Nats-Msg-Id") or [""])[0], "event": ev}) + "\n")
            n += 1
    print(f"{n} events, {bad} not readable")
    return 0 if bad == 0 else 1


def load(path, wid=None):
    out = []
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            d = rec["event"].get("data") or {}
            if wid is None or d.get("workflow_id") == wid:
                out.append(rec)
    out.sort(key=lambda r: r["seq"])
    return out


def stream(path, wid):
    recs = load(path, wid)
    problems = []
    ids = Counter(r["event"].get("id") for r in recs)
    dup_ids = {k: v for k, v in ids.items() if v > 1}
    mids = Counter(r["msg_id"] for r in recs if r["msg_id"])
    dup_mids = {k: v for k, v in mids.items() if v > 1}
    if dup_ids:
        problems.append(f"{len(dup_ids)} event ids stored more than once, e.g. {sorted(dup_ids.items())[:3]}")
    if dup_mids:
        problems.append(f"{len(dup_mids)} message ids stored more than once, e.g. {sorted(dup_mids.items())[:3]}")
    # per node (and generation): the sequence of its first succeeded, and
    # of any running stored after it
    done = {}
    late = []
    # per attempt of a node (attempts are numbered across generations): its
    # running stored, and its first end; an attempt that ended (attempt > 0:
    # blocked or cancelled before anything started is attempt 0) must
    # have its running in the stream too
    ran = set()
    ended = {}
    types = Counter()
    for r in recs:
        ev = r["event"]
        types[ev.get("type", "?")] += 1
        if not ev.get("type", "").startswith("gantry.node."):
            continue
        d = ev["data"]
        k = (d.get("generation"), d.get("formula"), d.get("node"))
        a = (d.get("formula"), d.get("node"), d.get("attempt") or 0)
        st = d.get("status")
        if st == "succeeded":
            done.setdefault(k, r["seq"])
        elif st == "running" and k in done:
            late.append(f"{k[1]}/{k[2]} running at seq {r['seq']} after succeeded at seq {done[k]}")
        if st == "running" and d.get("started_at"):
            # an attempt's start; a running without one only says what it
            # waits for (a host lock, a slot)
            ran.add(a)
        elif a[2] > 0 and st in ("succeeded", "failed", "skipped", "cancelled"):
            ended.setdefault(a, (st, r["seq"]))
    unran = [f"{a[0]}/{a[1]} attempt {a[2]} {st} at seq {seq}" for a, (st, seq) in sorted(ended.items(), key=lambda x: x[1][1]) if a not in ran]
    if late:
        problems.append(f"{len(late)} nodes running after they succeeded: {late[:5]}")
    if unran:
        problems.append(f"{len(unran)} attempts ended without their running stored: {unran[:5]}")
    node_types = ", ".join(f"{t.split('.', 1)[1]} {n}" for t, n in sorted(types.items()))
    print(f"{len(recs)} events of {wid} (seq {recs[0]['seq'] if recs else '-'}..{recs[-1]['seq'] if recs else '-'}): {node_types}")
    print(f"duplicate event ids: {len(dup_ids)}; duplicate message ids: {len(dup_mids)}; nodes running after succeeded: {len(late)}; "
          f"attempts ended without their running: {len(unran)}")
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems or not recs else 0


def markers(name, wids, want, files):
    wids = set(wids.split(","))
    per = Counter()
    by_wf = Counter()
    other = []
    lines = 0
    for fn in files:
        with open(fn) as f:
            for line in f:
                p = line.split()
                if len(p) < 2 or p[0] != name:
                    continue
                lines += 1
                per[p[1]] += 1
                if len(p) >= 3:
                    a = p[2].split(".")
                    if a[0] not in wids:
                        other.append(p[2])
                    by_wf[f"{a[0]} gen {a[1]} attempt {a[5]}" if len(a) >= 6 else a[0]] += 1
    rep = sorted(k for k, v in per.items() if v > 1)
    print(f"{lines} marker lines of {name}, {len(per)} nodes, {len(rep)} ran more than once{': ' + ' '.join(f'{k}x{per[k]}' for k in rep[:10]) if rep else ''}; "
          f"{len(other)} of no workflow of {name}; {', '.join(f'{k}: {v}' for k, v in sorted(by_wf.items()))}")
    ok = lines == want and len(per) == want and not rep and not other
    if not ok:
        print(f"PROBLEM: want {want} nodes, each once, by {' or '.join(sorted(wids))}")
    return 0 if ok else 1


def workflows(path, name):
    seen = []
    for r in load(path):
        ev = r["event"]
        d = ev.get("data") or {}
        if ev.get("type") == "gantry.workflow.accepted" and d.get("workflow") == name and d.get("workflow_id") not in seen:
            seen.append(d["workflow_id"])
    print(",".join(seen))
    return 0


def status_nodes(doc):
    out = {}
    for fid, f in (doc.get("formulas") or {}).items():
        for nid, n in (f.get("nodes") or {}).items():
            out[(fid, nid)] = n.get("status")
    return out


def agree(status_path, state_path, events_path, wid, name):
    """The workflow's document against its events; the per-host state
    against the last node event of any workflow of the composition."""
    doc = json.load(open(status_path))
    st = status_nodes(doc)
    rows = [r for r in json.load(open(state_path)) if r.get("workflow") == name]
    state = {(r["formula"], r["node"]): (r.get("status"), r.get("workflow_id")) for r in rows}
    mine, last = {}, {}
    for r in load(events_path):
        ev = r["event"]
        d = ev.get("data") or {}
        if not ev.get("type", "").startswith("gantry.node.") or d.get("workflow") != name:
            continue
        k = (d["formula"], d["node"])
        last[k] = (d["status"], d["workflow_id"])
        if d["workflow_id"] == wid:
            mine[k] = d["status"]
    problems = []
    for k in sorted(set(st) | set(mine)):
        if st.get(k) != mine.get(k):
            problems.append(f"{k[0]}/{k[1]}: gantry status {st.get(k)}, its last event {mine.get(k)}")
    for k in sorted(set(state) | set(last)):
        if state.get(k) != last.get(k):
            problems.append(f"{k[0]}/{k[1]}: gantry state {state.get(k)}, the last event of {name} {last.get(k)}")
    print(f"{len(problems)} disagree; gantry status: workflow {doc.get('status')}, {len(st)} nodes {dict(Counter(st.values()))}; "
          f"gantry state: {len(state)} nodes of {name} {dict(Counter(v[0] for v in state.values()))}; stream: {len(mine)} nodes")
    for p in problems[:10]:
        print("PROBLEM:", p)
    return 1 if problems else 0


def summary(path=None):
    try:
        doc = json.load(open(path) if path else sys.stdin)
    except ValueError:
        print("? (no JSON)")
        return 1
    c = Counter(status_nodes(doc).values())
    n = sum(c.values())
    print(f"{doc.get('status')} {c.get('succeeded', 0)}/{n} succeeded, {c.get('running', 0)} running, "
          f"{c.get('skipped', 0)} skipped, {c.get('failed', 0)} failed")
    return 0


def get(port, path, timeout=2):
    return json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout))


def leader(ports):
    for p in ports:
        try:
            d = get(p, "/jsz")
        except OSError:
            continue
        l = (d.get("meta_cluster") or {}).get("leader")
        if l:
            print(l)
            return 0
    return 1


def wait_leader(secs, ports):
    end = time.time() + float(secs)
    while time.time() < end:
        seen = set()
        for p in ports:
            try:
                seen.add((get(p, "/jsz").get("meta_cluster") or {}).get("leader"))
            except OSError:
                seen.add(None)
        if len(seen) == 1 and None not in seen and "" not in seen:
            print(seen.pop())
            return 0
        time.sleep(0.5)
    return 1


def not_current(ports):
    """What is not current: "stream[/consumer] (why)" for each stream or
    consumer (of every account but the system's) without a leader, or with
    a replica offline or not current as its leader sees it (only the
    leader knows: a follower shows the other followers not current)."""
    bad, led, names = [], set(), set()
    for p in ports:
        try:
            server = get(p, "/varz").get("server_name")
            d = get(p, "/jsz?accounts=true&streams=true&consumers=true")
        except OSError as e:
            bad.append(f"{p}: unreachable ({e.__class__.__name__})")
            continue
        for a in d.get("account_details") or []:
            if a.get("name") == "$SYS":
                continue
            for st in a.get("stream_detail") or []:
                groups = [(st.get("name"), st.get("cluster"))]
                groups += [(st.get("name") + "/" + c.get("name", ""), c.get("cluster")) for c in st.get("consumer_detail") or []]
                for name, cl in groups:
                    cl = cl or {}
                    names.add(name)
                    if not cl.get("leader") or cl.get("leader") != server:
                        continue
                    led.add(name)
                    for r in cl.get("replicas") or []:
                        if r.get("offline") or not r.get("current"):
                            bad.append(f"{name} (replica {r.get('name')} {'offline' if r.get('offline') else 'not current'})")
    bad += [f"{name} (no leader)" for name in sorted(names - led)]
    return bad


def wait_current(secs, ports):
    start = time.time()
    end = start + float(secs)
    while True:
        bad = not_current(ports)
        if not bad:
            print(f"{time.time() - start:.1f}")
            return 0
        if time.time() >= end:
            print(f"{len(bad)} not current after {secs} s: " + "; ".join(sorted(set(bad))[:8]))
            return 1
        time.sleep(1)


def ts(s):
    # 2026-11-26T09:55:42.311801326Z: nanoseconds are more than Python parses
    s = s.rstrip("Z")
    base, _, frac = s.partition(".")
    return datetime.fromisoformat(base + "+00:00").timestamp() + float("0." + (frac or "0"))


def conns(since, until, ports):
    since, until = float(since), float(until)
    now = {}
    started = Counter()
    reasons = Counter()
    total = 0
    for p in ports:
        try:
            v = get(p, "/varz")
            c = get(p, "/connz?state=all&limit=100000")
        except OSError as e:
            now[p] = f"unreachable ({e.__class__.__name__})"
            continue
        total += v.get("total_connections", 0)
        open_ = Counter()
        for x in c.get("connections") or []:
            name = x.get("name") or ""
            if name not in SERVICES:
                continue
            t = ts(x["start"])
            if since <= t <= until:
                started[v["server_name"]] += 1
                if x.get("reason"):
                    reasons[x["reason"]] += 1
            if not x.get("stop"):
                open_[name.removeprefix("gantry-")] += 1
        now[v["server_name"]] = dict(sorted(open_.items()))
    spread = sum(1 for v in now.values() if isinstance(v, dict) and v)
    print(json.dumps({"services_on": now, "servers_with_services": spread, "service_connections_started": sum(started.values()),
                      "started_by_server": dict(started), "closed_reasons": dict(reasons), "total_connections": total}))
    return 0


def main(argv):
    cmd, args = argv[1], argv[2:]
    if cmd == "dump":
        return dump(*args)
    if cmd == "stream":
        return stream(*args)
    if cmd == "markers":
        return markers(args[0], args[1], int(args[2]), args[3:])
    if cmd == "workflows":
        return workflows(*args)
    if cmd == "agree":
        return agree(*args)
    if cmd == "summary":
        return summary(*args)
    if cmd == "leader":
        return leader(args)
    if cmd == "wait-leader":
        return wait_leader(args[0], args[1:])
    if cmd == "wait-current":
        return wait_current(args[0], args[1:])
    if cmd == "conns":
        return conns(args[0], args[1], args[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
