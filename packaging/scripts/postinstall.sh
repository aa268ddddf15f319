#!/bin/sh
# After install or upgrade (dpkg: "configure" [old version]; rpm: 1 or 2).
# Creates the gantry system user the units run as, and the folders for its
# keys; reloads systemd and restarts the units that were running (upgrade).
# Starts nothing on a first install: the services need their settings first.
set -e
if ! getent group gantry >/dev/null; then
	groupadd --system gantry
fi
if ! getent passwd gantry >/dev/null; then
	useradd --system --gid gantry --home-dir /var/lib/gantry --no-create-home \
		--shell /usr/sbin/nologin --comment "gantry services" gantry
fi
# Keys and secrets: readable by the gantry group, not by other users.
for d in /etc/gantry/nats /etc/gantry/ssh /etc/gantry/secrets; do
	[ -d "$d" ] || install -d -m 0750 -o root -g gantry "$d"
done
[ -d /var/lib/gantry ] || install -d -m 0750 -o gantry -g gantry /var/lib/gantry
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
	systemctl daemon-reload || true
	for s in planner executor health-gate state-store; do
		systemctl try-restart "gantry-$s.service" || true
	done
fi
exit 0
