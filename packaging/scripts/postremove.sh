#!/bin/sh
# After removal. The gantry user, /var/lib/gantry and the keys under
# /etc/gantry stay (dpkg --purge removes the env files, not the keys).
set -e
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
	systemctl daemon-reload || true
fi
exit 0
