#!/usr/bin/env bash
# Makes a Docker daemon and sandboxkit's local test images available on this
# machine, for the native backend's tests. Idempotent: what is there already
# is reused, so running it before every `go test` costs about a second.
#
#   scripts/docker-setup.sh              docker.io installed, dockerd running,
#                                        the busybox, scratch and Debian test
#                                        images built (Debian: about a minute
#                                        the first time, with debootstrap)
#   scripts/docker-setup.sh --no-debian  without the Debian image (its tests
#                                        then skip, or fail under
#                                        SBX_REQUIRE_DOCKER=1)
#   scripts/docker-setup.sh --no-runsc   without gVisor: by default Debian's
#                                        runsc is installed and registered
#                                        with dockerd as runtime "runsc"
#
# No image registry is needed: every image is built here from Debian packages
# (busybox-static, debootstrap) and `docker import`. The Debian mirror comes
# from this machine's APT sources, read at run time.
#
# Environment: SBX_DOCKERD_LOG (default /tmp/sandboxkit-dockerd.log),
# SBX_DOCKERD_WAIT seconds to wait for the daemon's socket (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."

want_debian=1
want_runsc=1
for arg in "$@"; do
	case "$arg" in
	--no-debian) want_debian=0 ;;
	--no-runsc) want_runsc=0 ;;
	-h | --help) sed -n '2,20p' "$0"; exit 0 ;;
	*) echo "docker-setup.sh: unknown argument $arg (known: --no-debian, --no-runsc)" >&2; exit 2 ;;
	esac
done

log() { echo "docker-setup: $*" >&2; }

# Images this script builds; tests name them through internal/dockertest.
BUSYBOX_IMAGE=sandboxkit-test/busybox:1
SCRATCH_IMAGE=sandboxkit-test/scratch:1
DEBIAN_IMAGE=sandboxkit-test/debian:1

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# --- packages -----------------------------------------------------------------
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
# A registry on loopback for the pull tests (internal/dockertest starts it).
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
if [ "$want_debian" = 1 ]; then
	command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
fi
# gVisor, registered with dockerd below, for runtime = "gvisor".
[ "$want_runsc" = 0 ] || command -v runsc >/dev/null 2>&1 || missing+=(runsc)
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	as_root apt-get update -q
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# The Debian package's client (/usr/bin/docker) matches its daemon; a newer
# client elsewhere on PATH works too, so use whichever `docker` is found.
DOCKER=docker

# --- daemon -------------------------------------------------------------------
if ! $DOCKER info >/dev/null 2>&1; then
	if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST#unix://}" = "$DOCKER_HOST" ]; then
		log "DOCKER_HOST=$DOCKER_HOST does not answer; not starting a local daemon for a remote host"
		exit 1
	fi
	logf=${SBX_DOCKERD_LOG:-/tmp/sandboxkit-dockerd.log}
	wait_s=${SBX_DOCKERD_WAIT:-60}
	log "no Docker daemon answers; starting dockerd (log: $logf)"
	# containerd is started by dockerd itself when none runs.
	as_root sh -c "cd / && nohup dockerd >'$logf' 2>&1 </dev/null &"
	i=0
	until $DOCKER info >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt $((wait_s * 4)) ]; then
			log "dockerd did not answer within ${wait_s}s; last lines of $logf:"
			tail -n 30 "$logf" >&2 || true
			exit 1
		fi
		sleep 0.25
	done
	log "dockerd is up ($($DOCKER version --format '{{.Server.Version}}'))"
fi

# --- gVisor: runsc as a runtime of dockerd -------------------------------------
# Registered in /etc/docker/daemon.json (merged with what is there) and
# loaded with SIGHUP, which reloads runtimes without a restart. Debian's
# runsc (2022-12) takes every network namespace for the host's on kernels
# that show /proc/sys/net/core/rmem_default in each (this machine's), and
# then refuses its own network stack: --network=host has it use the
# kernel's stack inside the container's own namespace, which the egress
# enforcer then governs as it does runc's. --host-uds=all lets the sandbox's
# agent make its socket on the host (in a volume native dials), as lite's
# does: without it each command goes through the engine's exec.
# --overlay2=none writes the root file system's changes to the engine's
# own layer, where commits (snapshots, forks) and restarts find them
# (newer runsc keep them in an overlay of their own by default, lost when
# the container stops).
#
# Two gVisors are registered: Debian's as "runsc" and, when it can be
# built (scripts/gvisor-release.sh: a current release from gVisor's own
# module, static, about a minute once), that release as "runsc-20260905",
# which an entry names with runtime = "runsc-20260905".
register_runtime() { # NAME PATH
	if $DOCKER info --format "{{json (index .Runtimes \"$1\")}}" 2>/dev/null | grep -q -- '--overlay2=none'; then
		return 0
	fi
	log "registering $2 with dockerd as runtime $1"
	as_root python3 - "$1" "$2" <<'PY'
import json, os, sys
p = "/etc/docker/daemon.json"
cfg = {}
if os.path.exists(p):
    with open(p) as f:
        text = f.read().strip()
    cfg = json.loads(text) if text else {}
cfg.setdefault("runtimes", {})[sys.argv[1]] = {"path": sys.argv[2], "runtimeArgs": ["--network=host", "--host-uds=all", "--overlay2=none"]}
os.makedirs(os.path.dirname(p), exist_ok=True)
with open(p + ".tmp", "w") as f:
    json.dump(cfg, f, indent=2)
os.replace(p + ".tmp", p)
PY
	pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -xo dockerd)
	as_root kill -HUP "$pid"
	i=0
	until $DOCKER info --format "{{json (index .Runtimes \"$1\")}}" 2>/dev/null | grep -q -- '--overlay2=none'; do
		i=$((i + 1))
		if [ "$i" -gt 40 ]; then
			log "dockerd did not load runtime $1 from /etc/docker/daemon.json within 10s"
			exit 1
		fi
		sleep 0.25
	done
}
if [ "$want_runsc" = 1 ] && [ -z "${DOCKER_HOST:-}" ] && command -v runsc >/dev/null 2>&1; then
	register_runtime runsc "$(command -v runsc)"
	if release=$(./scripts/gvisor-release.sh); then
		register_runtime "$(basename "$release")" "$release"
	else
		log "gVisor's release could not be built; only Debian's runsc is registered"
	fi
fi

have_image() { $DOCKER image inspect "$1" >/dev/null 2>&1; }

work=$(mktemp -d)
trap 'as_root rm -rf "$work"' EXIT

# --- busybox: a root file system of busybox-static and its applet links -------
if ! have_image "$BUSYBOX_IMAGE"; then
	log "building $BUSYBOX_IMAGE"
	root=$work/busybox
	mkdir -p "$root"/bin "$root"/tmp "$root"/etc "$root"/root "$root"/proc "$root"/sys "$root"/dev
	chmod 1777 "$root"/tmp
	cp /bin/busybox "$root"/bin/busybox
	for applet in $(/bin/busybox --list); do
		[ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
	done
	ln -s bin "$root"/sbin
	mkdir -p "$root"/usr && ln -s ../bin "$root"/usr/bin && ln -s ../bin "$root"/usr/sbin
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root"/etc/passwd
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$root"/etc/group
	tar -C "$root" --numeric-owner --owner=0 --group=0 -c . |
		$DOCKER import \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'CMD ["sh"]' \
			- "$BUSYBOX_IMAGE" >/dev/null
fi

# --- scratch: nothing but a static test program -------------------------------
# Rebuilt when testbin's source changes (its hash is a label on the image).
testbin_hash=$(cat internal/dockertest/testbin/*.go | sha256sum | cut -c1-16)
if [ "$($DOCKER image inspect --format '{{index .Config.Labels "sandboxkit.test.src"}}' "$SCRATCH_IMAGE" 2>/dev/null || true)" != "$testbin_hash" ]; then
	log "building $SCRATCH_IMAGE"
	root=$work/scratch
	mkdir -p "$root"
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$root"/testbin ./internal/dockertest/testbin
	tar -C "$root" --numeric-owner --owner=0 --group=0 -c . |
		$DOCKER import --change 'CMD ["/testbin", "serve"]' --change "LABEL sandboxkit.test.src=$testbin_hash" \
			- "$SCRATCH_IMAGE" >/dev/null
fi

# --- debian: debootstrap minbase with bash, coreutils and python3 --------------
if [ "$want_debian" = 1 ] && ! have_image "$DEBIAN_IMAGE"; then
	# Mirror and suite from this machine's APT sources (deb822 or one-line).
	mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	if [ -z "$mirror" ]; then
		mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' || true)
	fi
	if [ -z "$mirror" ]; then
		log "no Debian mirror found in /etc/apt/sources.list{,.d}; cannot build $DEBIAN_IMAGE"
		exit 1
	fi
	suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
	log "building $DEBIAN_IMAGE (debootstrap $suite from the APT mirror)"
	root=$work/debian
	as_root debootstrap --variant=minbase --include=bash,coreutils,python3-minimal,python3 \
		"$suite" "$root" "$mirror" >"$work"/debootstrap.log 2>&1 || {
		tail -n 30 "$work"/debootstrap.log >&2
		exit 1
	}
	as_root rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
	as_root tar -C "$root" --numeric-owner -c . |
		$DOCKER import \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'CMD ["bash"]' \
			- "$DEBIAN_IMAGE" >/dev/null
fi

# --- debian-gdb: the Debian image with gdb, for the gdb_mcp initializer ----------
if [ "$want_debian" = 1 ]; then DOCKER=$DOCKER ./scripts/gdb-image.sh; fi

log "ready: $($DOCKER images --format '{{.Repository}}:{{.Tag}}' 'sandboxkit-test/*' | sort | tr '\n' ' ')"
