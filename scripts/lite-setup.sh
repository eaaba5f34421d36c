#!/usr/bin/env bash
# Installs what the lite backend and its tests need on a Debian host, from
# Debian's packages: an OCI runtime (runc; crun too), busybox-static (the
# tests build their root file system from it) and docker-registry (the pull
# test), and for egress policies iproute2 and nftables (the enforcer's
# rules; the tests' fake internet). Then gVisor's runsc, for lite's suites'
# second pass (scripts/test.sh): a failure to install it only says so, and
# that pass skips (or fails, under SBX_REQUIRE_RUNSC=1). Idempotent: what
# is installed already is kept. Needs root.
set -euo pipefail

need=()
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || need+=(runc)
command -v crun >/dev/null 2>&1 || need+=(crun)
[ -x /bin/busybox ] || command -v busybox >/dev/null 2>&1 || need+=(busybox-static)
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)

if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "lite-setup: missing ${need[*]}; install them (Debian: apt-get install ${need[*]}) as root" >&2
		exit 1
	fi
	echo "lite-setup: installing ${need[*]}" >&2
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# overlayfs must be available (a module on some kernels).
if ! grep -qw overlay /proc/filesystems; then
	modprobe overlay 2>/dev/null || true
	grep -qw overlay /proc/filesystems || { echo "lite-setup: the kernel has no overlayfs" >&2; exit 1; }
fi

# gVisor (Debian's runsc): optional for lite itself.
if ! command -v runsc >/dev/null 2>&1 && [ ! -x /usr/sbin/runsc ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "lite-setup: installing runsc" >&2
		if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc >/dev/null; then
			apt-get update -qq >/dev/null || true
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends runsc >/dev/null ||
				echo "lite-setup: runsc could not be installed; lite's gVisor pass will skip" >&2
		fi
	else
		echo "lite-setup: no runsc (Debian: apt-get install runsc, as root); lite's gVisor pass will skip" >&2
	fi
fi

# A current gVisor release beside it (scripts/gvisor-release.sh: built from
# gVisor's module once, about a minute), for lite's third pass: optional too.
if [ "$(id -u)" = 0 ] && command -v go >/dev/null 2>&1; then
	"$(dirname "$0")/gvisor-release.sh" >/dev/null ||
		echo "lite-setup: gVisor's release could not be built; lite's pass on it will skip" >&2
fi
