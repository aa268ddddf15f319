#!/usr/bin/env python3
"""Checks for docker/compose-test.sh, over what the nats CLI captured.

  events DECKY WORKFLOW ID COMPOSITION   lifecycle order against the plan
  state FILE STATUS [FORMULA/NODE=STATUS...]
                                         a state.workflow reply: status, every node
                                         succeeded but those named
  stopped FILE                           the run with target-2 stopped
  node FILE FORMULA/NODE                 a node's status in a state.workflow reply
  wait DECKY ID FORMULA NODE STATUS SECS [--generation N] [--print-source]
  restart DECKY ID CONTAINER             the retried run after an executor restart

DECKY and WORKFLOW are `nats sub --raw` captures: one CloudEvent per line.
"""
import gzip
import json
import subprocess
import sys
import time
from collections import Counter


def load(path, wid):
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            d = ev.get("data") or {}
            if d.get("workflow_id") == wid:
                out.append(ev)
    return out


def key(ev):
    d = ev["data"]
    kind = ev["type"].split(".")[1]
    return (kind, d.get("formula", ""), d.get("node", ""), d.get("status", ""))


def first(evs, k):
    for i, ev in enumerate(evs):
        if key(ev) == k:
            return i
    return -1


def events(decky, workflow, wid, composition):
    plan = json.loads(subprocess.check_output(["bin/gantry", "plan", composition, "--format", "json"]))
    evs = load(decky, wid)
    wevs = [ev["data"]["status"] for ev in load(workflow, wid) if ev["type"].startswith("gantry.workflow.")]
    problems = []
    if wevs[:1] != ["accepted"] or wevs[-1:] != ["succeeded"]:
        problems.append(f"workflow events {wevs}")
    nodes = 0
    for f in plan["formulas"]:
        fid = f["id"]
        ready = first(evs, ("formula", fid, "", "ready"))
        done = first(evs, ("formula", fid, "", "succeeded"))
        if ready < 0 or done < ready:
            problems.append(f"{fid}: ready at {ready}, succeeded at {done}")
        for dep in f.get("depends_on") or []:
            want = {"healthy": "healthy"}.get(dep.get("condition"), "succeeded")
            k = first(evs, ("formula", dep["formula"], "", want))
            if k < 0 or k > ready:
                problems.append(f"{fid} ready (event {ready}) before {dep['formula']} {want} (event {k})")
        if f.get("health_gate"):
            g, h = first(evs, ("formula", fid, "", "gating")), first(evs, ("formula", fid, "", "healthy"))
            if g < done or h < g:
                problems.append(f"{fid}: succeeded {done}, gating {g}, healthy {h}")
        for n in f["nodes"]:
            nodes += 1
            run = first(evs, ("node", fid, n["name"], "running"))
            ok = first(evs, ("node", fid, n["name"], "succeeded"))
            if run < ready or ok < run:
                problems.append(f"{fid}/{n['name']}: ready {ready}, running {run}, succeeded {ok}")
            for dep in n.get("depends_on") or []:
                k = first(evs, ("node", fid, dep, "succeeded"))
                if k < 0 or k > run:
                    problems.append(f"{fid}/{n['name']} ran before {dep} succeeded")
    counts = Counter(f"{key(ev)[0]}.{key(ev)[3]}" for ev in evs)
    sources = Counter(ev["source"] for ev in evs if ev["type"].startswith("gantry.node."))
    hosts = Counter(ev["data"]["host"] for ev in evs if ev["type"] == "gantry.node.succeeded")
    print(f"{len(evs)} events on decky.*.lifecycle, workflow.{wid[:8]}….lifecycle: {' -> '.join(wevs)}")
    print("by type: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("node successes by host: " + ", ".join(f"{k} {v}" for k, v in sorted(hosts.items())))
    print("node events by executor: " + ", ".join(f"{k} {v}" for k, v in sorted(sources.items())))
    if counts["node.succeeded"] != nodes:
        problems.append(f"{counts['node.succeeded']} node successes for {nodes} nodes")
    if len(sources) < 2:
        problems.append(f"only {len(sources)} executor replica ran nodes")
    for p in problems:
        print("PROBLEM:", p)
    print(f"order of {len(plan['formulas'])} formulas and {nodes} nodes against the plan: {'ok' if not problems else 'WRONG'}")
    return 1 if problems else 0


def doc(path):
    # A large reply comes gzip-compressed (Content-Encoding: gzip).
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data)


def state(path, status, *expect):
    d = doc(path)
    want = dict(e.split("=", 1) for e in expect)
    nodes = [(fid, n, nd) for fid, f in d["formulas"].items() for n, nd in f["nodes"].items()]
    by = Counter(nd["status"] for _, _, nd in nodes)
    print(f"workflow {d['workflow_id']} {d['status']} generation {d['generation']}: "
          f"{len(d['formulas'])} formulas, nodes " + ", ".join(f"{k} {v}" for k, v in sorted(by.items())))
    bad = [f"{fid}/{n} {nd['status']}" for fid, n, nd in nodes if nd["status"] != want.get(f"{fid}/{n}", "succeeded")]
    if d["status"] != status or bad or len(nodes) != d["node_count"]:
        print("PROBLEM:", d["status"], bad)
        return 1
    return 0


def node(path, ref):
    fid, n = ref.split("/", 1)
    print(doc(path)["formulas"][fid]["nodes"][n]["status"])
    return 0


def stopped(path):
    d = doc(path)
    fs = d["formulas"]
    print(f"workflow {d['status']}: {d.get('error', '')}")
    for fid in sorted(fs):
        f = fs[fid]
        line = f"{fid:22} {f['status']:10}"
        if f.get("blocker"):
            line += f" blocked by {f['blocker']}"
        for n, nd in sorted(f["nodes"].items()):
            if nd["status"] == "failed":
                line += f" | {n} failed after {nd['attempts']} attempt(s): {nd.get('error', '')[:90]}"
        print(line)
    problems = []
    if d["status"] != "failed":
        problems.append(f"workflow {d['status']}")
    w0 = [fs[f] for f in ("worker-0-containerd",) if f in fs]
    if not w0 or not any(nd["status"] == "failed" for nd in w0[0]["nodes"].values()):
        problems.append("no failed node in worker-0-containerd")
    for fid in ("worker-0-kubernetes", "cni"):
        if fs[fid]["status"] != "blocked" or fs[fid].get("blocker") != "worker-0-containerd":
            problems.append(f"{fid} {fs[fid]['status']} by {fs[fid].get('blocker')}, want blocked by worker-0-containerd")
        if any(nd["status"] not in ("blocked", "pending") for nd in fs[fid]["nodes"].values()):
            problems.append(f"a node of {fid} ran")
    # on_failure stop: what had finished stays finished, what had not
    # started is cancelled; nothing else fails.
    for fid, f in fs.items():
        if fid not in ("worker-0-containerd", "worker-0-kubernetes", "cni") and f["status"] not in ("succeeded", "healthy", "cancelled"):
            problems.append(f"{fid} {f['status']}")
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


def wait(decky, wid, formula, node, status, secs, *opts):
    gen = int(opts[opts.index("--generation") + 1]) if "--generation" in opts else None
    deadline = time.time() + float(secs)
    while time.time() < deadline:
        for ev in load(decky, wid):
            if key(ev) == ("node", formula, node, status) and (gen is None or ev["data"].get("generation") == gen):
                if "--print-source" in opts:
                    print(ev["source"])
                return 0
        time.sleep(0.1)
    return 1


def restart(decky, wid, container):
    evs = [ev for ev in load(decky, wid) if ev["data"].get("generation") == 2]
    counts = Counter(f"{key(ev)[0]}.{key(ev)[3]}" for ev in evs)
    print("retry (generation 2) events: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    sources = Counter(ev["source"] for ev in evs if ev["type"].startswith("gantry.node."))
    print("node events by executor: " + ", ".join(f"{k} {v}" for k, v in sorted(sources.items())))
    for ev in evs:
        d = ev["data"]
        if d.get("formula") == "worker-0-containerd" and ev["type"].startswith("gantry.node."):
            print(f"  {ev['time'][11:23]} {d['node']:18} {d['status']:10} attempt {d.get('attempt')} by {ev['source']}")
    if not any(s.startswith("executor/" + container) for s in sources):
        print(f"PROBLEM: no node event from the restarted executor {container}")
        return 1
    return 0 if counts["formula.succeeded"] > 0 else 1


def main(argv):
    cmds = {"events": events, "state": state, "stopped": stopped, "node": node, "wait": wait, "restart": restart}
    if len(argv) < 2 or argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        return 2
    return cmds[argv[1]](*argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
