#!/usr/bin/env bash
# `make dev-keys`: the keys of the compose stack, made once (FORCE=1 makes
# new ones). Writes under dev/keys (git-ignored):
#   client/id_ed25519        the user key of the executors and the health gate
#   client/known_hosts       the targets' host keys: strict checking stays on
#   target-N/ssh_host_ed25519_key, target-N/authorized_keys
#   nats/<identity>.nk       an nkey seed per NATS identity (operator, viewer,
#                            each service) and nats/server.conf, the accounts
#                            and permissions nats-server enforces; a client
#                            with no credentials is a viewer
# and dev/secrets/demo_token, a random secret the executors and the health
# gate read as {secret: demo_token} (their --secrets-dir, /secrets).
# Everything is mounted read-only by docker-compose.yml. FORCE=1 makes all
# of them new, NATS seeds included. The compose stack's keys service runs
# this in a container (KEYS_DIR in the checkout mounted at /src); there
# KEYS_OWNER=/src gives what it wrote to the checkout's owner, not root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${KEYS_DIR:-$root/dev/keys}
own() {
	if [ -n "${KEYS_OWNER:-}" ]; then chown -R --reference="$KEYS_OWNER" "$(dirname "$dir")"; fi
}
trap own EXIT
targets=${TARGETS:-"target-1 target-2 target-3"}
if ! command -v ssh-keygen >/dev/null; then
	echo "installing openssh-client (Debian)"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-client >/dev/null
fi
gantry=${GANTRY:-$root/bin/gantry}
if [ ! -x "$gantry" ]; then
	echo "building $gantry (for gantry auth init)"
	(cd "$root" && ${GO:-go} build -o "$gantry" ./cmd/gantry)
fi
secrets_dir=$(dirname "$dir")/secrets
dev_secrets() {
	mkdir -p -m 700 "$secrets_dir"
	[ -s "$secrets_dir/demo_token" ] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$secrets_dir/demo_token")
}
nats_keys() {
	# keeps the seeds already there (a stack made before NATS had
	# authentication gets them here); writes server.conf each time
	"$gantry" auth init --dir "$dir/nats" --anonymous-viewer >/dev/null
	echo "dev keys: NATS identities in $dir/nats (operator: --nkey $dir/nats/operator.nk)"
}
if [ -f "$dir/client/known_hosts" ] && [ -z "${FORCE:-}" ]; then
	echo "dev keys: present in $dir (FORCE=1 makes new ones)"
	nats_keys
	dev_secrets
	exit 0
fi
rm -rf "$dir"
mkdir -p "$dir/client"
ssh-keygen -q -t ed25519 -N '' -C gantry-dev -f "$dir/client/id_ed25519"
: >"$dir/client/known_hosts"
for t in $targets; do
	mkdir -p "$dir/$t"
	ssh-keygen -q -t ed25519 -N '' -C "$t" -f "$dir/$t/ssh_host_ed25519_key"
	cp "$dir/client/id_ed25519.pub" "$dir/$t/authorized_keys"
	echo "$t $(cut -d' ' -f1,2 "$dir/$t/ssh_host_ed25519_key.pub")" >>"$dir/client/known_hosts"
done
chmod 600 "$dir"/*/ssh_host_ed25519_key "$dir/client/id_ed25519"
echo "dev keys: written to $dir (user key, known_hosts for: $targets)"
nats_keys
dev_secrets
# Containers keep the files they mounted: a running stack still has the old
# keys, and the host's new operator seed is refused until it is recreated.
if command -v docker >/dev/null && [ -n "$(docker ps -q --filter "label=com.docker.compose.project=${COMPOSE_PROJECT_NAME:-gantry}" 2>/dev/null)" ]; then
	echo "dev keys: the running stack still uses the old keys: make down && make up"
fi
