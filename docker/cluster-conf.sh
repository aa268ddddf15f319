#!/usr/bin/env bash
# The per-node nats-server configuration of docker-compose.cluster.yml:
# dev/keys/nats/cluster/nats-N.conf includes server.conf (the accounts,
# users and permissions of `gantry auth init`, unchanged) and adds the node's
# name, JetStream (file storage in /data) and the cluster block: routes to
# the two other nodes, authenticated with a route user and a random password
# (cluster/route.pass, made once) that only the route port (6222, published
# on the docker network only) accepts. Clients are pinged every 3 s and
# dropped after 2 unanswered pings (a frozen service replica leaves its
# queue groups within about 9 s; nats-server's default is 2 minutes, as
# pkg/natsembed), and a node stopped with SIGUSR2 (docker-compose.cluster.yml's
# stop_signal) goes into lame duck mode: it hands its JetStream leaderships
# over, tells its clients, waits 5 s, then closes them one by one over at most
# 30 s, so they move to the other nodes a few at a time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${KEYS_DIR:-$root/dev/keys}/nats/cluster
mkdir -p -m 700 "$dir"
[ -s "$dir/route.pass" ] || (umask 077 && head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$dir/route.pass")
pass=$(cat "$dir/route.pass")
for n in 1 2 3; do
	routes=""
	for m in 1 2 3; do
		[ $m = $n ] || routes+="    \"nats-route://route:$pass@nats-$m:6222\"
"
	done
	(umask 077 && cat >"$dir/nats-$n.conf" <<CONF
# made by docker/cluster-conf.sh
include "server.conf"
server_name: "nats-$n"
http_port: 8222
ping_interval: "3s"
ping_max: 2
lame_duck_grace_period: "5s"
lame_duck_duration: "30s"
jetstream {
  store_dir: "/data"
}
cluster {
  name: "gantry"
  listen: "0.0.0.0:6222"
  authorization {
    user: "route"
    password: "$pass"
  }
  routes: [
$routes  ]
}
CONF
	)
done
echo "cluster conf: $dir/nats-{1,2,3}.conf"
