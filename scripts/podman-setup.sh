#!/usr/bin/env bash
# Starts Podman's Docker-compatible API on a socket of its own, with the
# busybox and scratch test images loaded, so the native backend's tests can
# run against Podman (DOCKER_HOST=unix://$SBX_PODMAN_DIR/podman.sock).
# Needs root and scripts/docker-setup.sh run first (the images are copied
# from Docker). Idempotent: a service that answers is reused.
#
#   scripts/podman-setup.sh          set up; prints the DOCKER_HOST to use
#   scripts/podman-setup.sh down     stop the service
#
# What these machines need (Podman 4.3 from Debian 12):
#   - runc, not crun: crun refuses cgroup v1/v2 hybrid hosts;
#   - explicit default ulimits: Podman asks for RLIMIT_NOFILE 1048576 and
#     RLIMIT_NPROC above this container's hard limits, and without
#     CAP_SYS_RESOURCE runc cannot raise them ("error setting rlimits ...
#     operation not permitted");
#   - cgroupfs and a file events logger (no systemd here).
# They live in a containers.conf of its own (CONTAINERS_CONF), so nothing
# under /etc is changed.
#
# Environment: SBX_PODMAN_DIR (default /run/sandboxkit-podman).
set -euo pipefail

dir=${SBX_PODMAN_DIR:-/run/sandboxkit-podman}
sock="$dir/podman.sock"
log() { echo "podman-setup: $*" >&2; }

answers() { curl -fsS --max-time 5 --unix-socket "$sock" http://podman/_ping >/dev/null 2>&1; }

if [ "${1:-}" = down ]; then
	if [ -f "$dir/service.pid" ]; then
		kill "$(cat "$dir/service.pid")" 2>/dev/null || true
		rm -f "$dir/service.pid" "$sock"
	fi
	exit 0
fi

if [ "$(id -u)" != 0 ]; then
	log "needs root (a rootful Podman service on $sock)"
	exit 1
fi
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	apt-get update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi

mkdir -p "$dir"
hard_nofile=$(ulimit -Hn)
[ "$hard_nofile" = unlimited ] && hard_nofile=1048576
nofile=$((hard_nofile < 65536 ? hard_nofile : 65536))
# The service's own hard RLIMIT_NPROC can be below this shell's (32768 was
# seen); 4096 is native's default pids limit anyway.
hard_nproc=$(ulimit -Hu)
[ "$hard_nproc" = unlimited ] && hard_nproc=4096
nproc=$((hard_nproc < 4096 ? hard_nproc : 4096))
cat >"$dir/containers.conf" <<EOF
# Written by scripts/podman-setup.sh.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$dir/containers.conf"

# A service started with another containers.conf is restarted.
if answers && ! cmp -s "$dir/containers.conf" "$dir/containers.conf.running"; then
	"$0" down
fi
if ! answers; then
	rm -f "$sock"
	# Podman's locks live in shared memory (/dev/shm/libpod_lock), its
	# containers and volumes on disk: when the memory was wiped and the disk
	# was not (a new machine session), a kept volume and a new container get
	# the same lock ("share lock ID 1: deadlock due to lock mismatch").
	# Renumbering gives everything on disk a fresh lock; it needs no other
	# Podman process running, which holds while the service is down.
	podman system renumber >/dev/null 2>&1 || log "podman system renumber failed (going on)"
	log "starting podman system service (log: $dir/service.log)"
	(cd / && exec nohup podman system service --time=0 "unix://$sock" >"$dir/service.log" 2>&1 </dev/null) &
	echo $! >"$dir/service.pid"
	cp "$dir/containers.conf" "$dir/containers.conf.running"
	i=0
	until answers; do
		i=$((i + 1))
		if [ "$i" -gt 120 ]; then
			log "the Podman service did not answer within 30 s; last lines of $dir/service.log:"
			tail -n 20 "$dir/service.log" >&2 || true
			exit 1
		fi
		sleep 0.25
	done
fi

for img in sandboxkit-test/busybox:1 sandboxkit-test/scratch:1; do
	# Rebuilt images (the scratch one follows its test binary) are copied
	# again: compare Docker's image ID with the one Podman keeps.
	want=$(docker image inspect --format '{{.Id}}' "$img")
	if ! podman image exists "$img" || [ "$(cat "$dir/loaded-${img//[\/:]/_}" 2>/dev/null)" != "$want" ]; then
		log "copying $img from Docker"
		docker save "$img" | podman load -q >/dev/null
		echo "$want" >"$dir/loaded-${img//[\/:]/_}"
	fi
done
echo "unix://$sock"
