#!/usr/bin/env bash
# make run: start `gantry dev` (NATS embedded, all four services), submit
# examples/hello.yaml and stream its events until it ends, then stop.
set -euo pipefail
cd "$(dirname "$0")/.."
gantry=bin/gantry
data=$(mktemp -d "${TMPDIR:-/tmp}/gantry-run.XXXXXX")
"$gantry" dev --port 0 --data-dir "$data" --log-level warn >"$data/dev.out" 2>"$data/dev.log" &
dev=$!
cleanup() {
  kill -INT "$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT
url=""
for _ in $(seq 1 100); do
  url=$(grep -o 'nats://[0-9.:]*' "$data/dev.out" 2>/dev/null | head -n 1 || true)
  [ -n "$url" ] && break
  kill -0 "$dev" 2>/dev/null || { cat "$data/dev.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "gantry dev did not start" >&2; cat "$data/dev.log" >&2; exit 1; }
# NATS answers before the services have registered; wait for them.
"$gantry" ping --server "$url" --service gantry-planner --service gantry-state-store --wait 60s >/dev/null
echo "gantry dev is up at $url; submitting examples/hello.yaml"
"$gantry" submit examples/hello.yaml --watch --server "$url"
