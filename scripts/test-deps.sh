#!/usr/bin/env bash
# What make test needs besides Go: OpenSSH's sshd (integration tests start
# real sshd processes on 127.0.0.1), sudo (become is tested through it, as
# throwaway users) and Debian's chromium (the web view is tested in
# headless Chromium). Installed with apt-get when missing.
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
[ -x /usr/bin/sudo ] || missing+=(sudo)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "make test needs: ${missing[*]} (install them, e.g. apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "installing ${missing[*]} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
