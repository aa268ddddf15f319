#!/usr/bin/env bash
# The per-node nats-server configuration of docker-compose.cluster.yml:
# dev/keys/nats/cluster/nats-N.conf includes server.conf (the accounts,
# users and permissions of `gantry auth init`, unchanged) and adds the node's
# name, JetStream (file storage in /data) and the cluster block: routes to
# the two other nodes, authenticated with a route user and a random password
# (cluster/route.pass, made once) that only the route port (6222, published
# on the docker network only) accepts.
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
