#!/usr/bin/env bash
# Builds sandboxkit-test/debian-gdb:1, the Debian test image with gdb added,
# for the gdb_mcp initializer's tests. Reused when it exists. Needs
# sandboxkit-test/debian:1 (scripts/docker-setup.sh) and the APT mirror of
# this machine's sources, which the build container uses with the host's
# network (nothing is written into the repository about the mirror).
set -euo pipefail

DOCKER=${DOCKER:-docker}
BASE_IMAGE=sandboxkit-test/debian:1
GDB_IMAGE=sandboxkit-test/debian-gdb:1

log() { echo "gdb-image: $*" >&2; }

if $DOCKER image inspect "$GDB_IMAGE" >/dev/null 2>&1; then
	exit 0
fi
if ! $DOCKER image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
	log "$BASE_IMAGE is missing (run scripts/docker-setup.sh); cannot build $GDB_IMAGE"
	exit 1
fi

# The host's APT sources (deb822 files and one-line lists) go into the build
# container as they are.
sources=$(mktemp -d)
trap 'rm -rf "$sources"; $DOCKER rm -f "$name" >/dev/null 2>&1 || true' EXIT
cp /etc/apt/sources.list.d/*.sources "$sources"/ 2>/dev/null || true
cp /etc/apt/sources.list.d/*.list "$sources"/ 2>/dev/null || true
if [ -f /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$sources"/host.list; fi
if [ -z "$(ls -A "$sources")" ]; then
	log "no APT sources in /etc/apt; cannot build $GDB_IMAGE"
	exit 1
fi

name=sbx-gdb-image-build-$$
log "building $GDB_IMAGE (apt-get install gdb in $BASE_IMAGE)"
$DOCKER run --name "$name" --network host -v "$sources":/host-sources:ro "$BASE_IMAGE" bash -euc '
	rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
	for f in /host-sources/*; do cp "$f" /etc/apt/sources.list.d/; done
	printf "Acquire::Check-Valid-Until \"false\";\n" >/etc/apt/apt.conf.d/99no-valid-until
	apt-get update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends gdb >/dev/null
	apt-get clean
	rm -rf /var/lib/apt/lists/*
' >&2
$DOCKER commit --change 'CMD ["bash"]' "$name" "$GDB_IMAGE" >/dev/null
log "built $GDB_IMAGE"
