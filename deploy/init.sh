#!/bin/sh
# Run once, before the first `docker compose -f deploy/compose.yaml up`: makes the
# private swarm's secrets and tells compose the bootstrap node's peer id.
#   deploy/secrets/swarm.key               the PSK (swarmnode keygen --psk)
#   deploy/secrets/bootstrap/identity.key  the bootstrap node's identity: a fixed peer id
#   deploy/.env                            BOOTSTRAP_PEER_ID=<that peer id>, read by compose
# Safe to run again: swarmnode never overwrites a key, so the ids stay the same.
# Uses `swarmnode` from PATH if there is one, else the swarmnode:cpu image (built if
# missing; SWARMNODE_IMAGE names another).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/secrets"
chmod 700 "$here/secrets"
if command -v swarmnode >/dev/null 2>&1; then
    out=$here/secrets
    sn() { swarmnode "$@"; }
else
    image=${SWARMNODE_IMAGE:-swarmnode:cpu}
    docker image inspect "$image" >/dev/null 2>&1 || docker build -t "$image" "$here/.."
    out=/secrets
    sn() { docker run --rm --user "$(id -u):$(id -g)" -v "$here/secrets:/secrets" "$image" "$@"; }
fi
[ -f "$here/secrets/swarm.key" ] || sn keygen --psk --data-dir "$out"
peer_id=$(sn keygen --data-dir "$out/bootstrap" | sed -n 's/^peer id: //p')
if [ -z "$peer_id" ]; then
    echo "init.sh: swarmnode keygen printed no peer id" >&2
    exit 1
fi
printf 'BOOTSTRAP_PEER_ID=%s\n' "$peer_id" > "$here/.env"
echo "bootstrap peer id: $peer_id (in $here/.env)"
