#!/bin/sh
# A local base image for the swarmnode Dockerfile, where no image registry is reachable:
# a Debian root filesystem made with debootstrap (python3.11, pip, venv) and imported
# with `docker import`. Also makes sure a Docker daemon answers first.
#   sh scripts/docker_base.sh [IMAGE]        IMAGE defaults to swarmnode-base:bookworm
# Then: sh scripts/docker_build.sh (the image, built offline from this base), or
#   docker build --build-arg BASE=swarmnode-base:bookworm ...   (see docs/docker.md)
#
# Idempotent: an image already present is kept (remove it to rebuild), a running daemon
# is used as it is. Missing tools (debootstrap, Debian's docker.io) are installed with
# apt-get, so that part needs root; dockerd is started in the background, as root, with
# its log in $SWARMNODE_DOCKERD_LOG, when none answers.
# Environment:
#   SWARMNODE_BASE_SUITE   Debian suite (default: bookworm, whose python3 is 3.11)
#   SWARMNODE_BASE_MIRROR  Debian mirror (default: the one this machine's apt uses)
#   SWARMNODE_DOCKERD_LOG  where a dockerd started here logs (default /var/log/swarmnode-dockerd.log)
# Prints the image name on its last line.
set -eu

image=${1:-swarmnode-base:bookworm}
suite=${SWARMNODE_BASE_SUITE:-bookworm}
dockerd_log=${SWARMNODE_DOCKERD_LOG:-/var/log/swarmnode-dockerd.log}

say() { echo "docker_base.sh: $*" >&2; }
die() { say "$*"; exit 1; }

apt_install() {  # apt_install PACKAGE...: Debian's packages, as root
    [ "$(id -u)" = 0 ] || die "needs root to install $* (apt-get)"
    command -v apt-get >/dev/null 2>&1 || die "no apt-get to install $*: install them by hand"
    say "installing $* with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2 || {
        apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "$@" >&2
    }
}

daemon_answers() { docker info >/dev/null 2>&1; }

ensure_daemon() {
    command -v docker >/dev/null 2>&1 || apt_install docker.io
    daemon_answers && return 0
    command -v dockerd >/dev/null 2>&1 || apt_install docker.io
    daemon_answers && return 0  # the package's own service may have started it
    [ "$(id -u)" = 0 ] || die "no Docker daemon answers, and starting one needs root"
    say "starting dockerd in the background (log: $dockerd_log)"
    # setsid: the daemon outlives this script and the test that ran it
    setsid dockerd >>"$dockerd_log" 2>&1 < /dev/null &
    i=0
    until daemon_answers; do
        i=$((i + 1))
        [ "$i" -le 60 ] || die "dockerd did not answer within 60 s; see $dockerd_log"
        sleep 1
    done
}

# The first Debian mirror this machine's apt reads for $suite (deb822 .sources or
# one-line sources.list); none found = empty.
host_mirror() {
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk -v suite="$suite" '
            /^[Uu][Rr][Ii][Ss]:/ { uri = $2 }
            /^[Ss]uites:/ { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
            /^[[:space:]]*$/ { if (hit && uri) { print uri; exit } uri = ""; hit = 0 }
            END { if (hit && uri) print uri }
        ' "$f"
    done | head -n 1
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v suite="$suite" '$1 == "deb" { for (i = 2; i < NF; i++) if ($i == suite && $(i - 1) ~ /:\/\//) { print $(i - 1); exit } }' "$f"
    done | head -n 1
}

ensure_daemon
if docker image inspect "$image" >/dev/null 2>&1; then
    say "$image is present (remove it to make it again)"
    echo "$image"
    exit 0
fi

mirror=${SWARMNODE_BASE_MIRROR:-$(host_mirror | head -n 1)}
[ -n "$mirror" ] || die "no Debian mirror for $suite in /etc/apt/sources.list(.d): set SWARMNODE_BASE_MIRROR"
command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
[ "$(id -u)" = 0 ] || die "debootstrap needs root"

work=$(mktemp -d /var/tmp/swarmnode-base.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
rootfs=$work/rootfs
say "debootstrap $suite from $mirror (a few minutes)"
debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
    "$suite" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 20 "$work/debootstrap.log" >&2
    die "debootstrap failed"
}
# The image's apt reads the same mirror (a build that installs compilers needs it);
# nothing downloaded is kept in the image.
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$suite" "$mirror" "$suite" \
    > "$rootfs/etc/apt/sources.list"
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    > "$rootfs/etc/apt/apt.conf.d/90swarmnode-no-recommends"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/root/.cache
chroot "$rootfs" python3 -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || die "$suite's python3 is not 3.11"

say "importing the root filesystem as $image"
tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase $suite + python3 python3-pip python3-venv" \
    - "$image" >&2
docker run --rm --network none "$image" python3 -m venv --help >/dev/null \
    || die "$image: python3 -m venv does not run"
echo "$image"
