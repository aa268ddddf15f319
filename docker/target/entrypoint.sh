#!/bin/bash
# Installs the mounted keys with the ownership and modes sshd insists on,
# then runs sshd in the foreground, logging to stderr.
set -euo pipefail
for f in /keys/ssh_host_ed25519_key /keys/authorized_keys; do
	[ -r "$f" ] || { echo "missing $f: run \`make dev-keys\`" >&2; exit 1; }
done
install -m 600 -o root -g root /keys/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key
install -m 600 -o root -g root /keys/authorized_keys /root/.ssh/authorized_keys
exec /usr/sbin/sshd -D -e
