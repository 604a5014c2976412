#!/bin/sh
# Run once, before the first `docker compose -f deploy/compose.yaml up`: makes the
# private swarm's secrets and tells compose the bootstrap node's peer id.
#   deploy/secrets/swarm.key               the PSK (swarmnode keygen --psk)
#   deploy/secrets/bootstrap/identity.key  the bootstrap node's identity: a fixed peer id
#   deploy/.env                            read by compose: BOOTSTRAP_PEER_ID=<that peer id>,
#                                          COMPOSE_PROJECT_NAME=swarmnode
# The containers run as the image's user (uid 10001, SWARMNODE_UID), and a compose
# secret is the host file itself, mounted: so the keys are made owned by that uid,
# mode 0600 (swarmnode refuses an identity key that others can read).
# Safe to run again: swarmnode never overwrites a key, so the ids stay the same.
# Uses `swarmnode` from PATH when it can give the keys to that uid (as root, or with no
# docker here), else the swarmnode:cpu image (built if missing; SWARMNODE_IMAGE names
# another; offline, build it first with scripts/docker_build.sh). SWARMNODE_INIT=local
# or =image chooses.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/secrets"
chmod 700 "$here/secrets"
keys="swarm.key bootstrap/identity.key"
how=${SWARMNODE_INIT:-}
if [ -z "$how" ]; then
    how=image
    if command -v swarmnode >/dev/null 2>&1 \
            && { [ "$(id -u)" = 0 ] || ! command -v docker >/dev/null 2>&1; }; then
        how=local
    fi
fi
if [ "$how" = local ]; then
    uid=${SWARMNODE_UID:-10001}
    out=$here/secrets
    sn() { swarmnode "$@"; }
    give() {
        if [ "$(id -u)" = 0 ]; then
            (cd "$out" && chown "$uid:$uid" $keys)
        else
            echo "init.sh: the containers (uid $uid) cannot read the keys until, as root:" \
                "chown $uid:$uid $out/swarm.key $out/bootstrap/identity.key" >&2
        fi
    }
elif [ "$how" = image ]; then
    image=${SWARMNODE_IMAGE:-swarmnode:cpu}
    docker image inspect "$image" >/dev/null 2>&1 || docker build -t "$image" "$here/.."
    uid=$(docker run --rm --entrypoint id "$image" -u)
    out=/secrets
    # as root in the container: it may write into secrets/ whoever owns it, and chown
    sn() { docker run --rm --user 0 -v "$here/secrets:/secrets" "$image" "$@"; }
    give() {
        docker run --rm --user 0 --workdir /secrets --entrypoint chown \
            -v "$here/secrets:/secrets" "$image" "$uid:$uid" $keys
    }
else
    echo "init.sh: SWARMNODE_INIT=$how: expected local or image" >&2
    exit 2
fi
[ -f "$here/secrets/swarm.key" ] || sn keygen --psk --data-dir "$out"
peer_id=$(sn keygen --data-dir "$out/bootstrap" | sed -n 's/^peer id: //p')
if [ -z "$peer_id" ]; then
    echo "init.sh: swarmnode keygen printed no peer id" >&2
    exit 1
fi
give
printf 'COMPOSE_PROJECT_NAME=swarmnode\nBOOTSTRAP_PEER_ID=%s\n' "$peer_id" > "$here/.env"
echo "bootstrap peer id: $peer_id (in $here/.env)"
