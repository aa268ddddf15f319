#!/bin/sh
# Before removal (dpkg: "remove"; rpm: 0). An upgrade (dpkg: "upgrade";
# rpm: 1) keeps the services running: postinstall restarts them.
set -e
case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
	for s in planner executor health-gate state-store; do
		systemctl disable --now "gantry-$s.service" >/dev/null 2>&1 || true
	done
fi
exit 0
