#!/usr/bin/env bash
# Runs sandboxkit's tests, after setting up what they need on this machine.
# Extra arguments go to `go test` (e.g. -run TestX, -v).
#
# Today the suites need the Go toolchain and busybox: the local backend runs
# host processes. Backends that need daemons (Docker, sshd, a registry, a cluster)
# install and start them here, before the tests, so that one command works
# on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1; then
	echo "scripts/test.sh: the Go toolchain (1.26+) is needed: https://go.dev/dl/" >&2
	exit 1
fi

# busybox: the fileops table also runs with busybox as the only tools on
# PATH, proving the generic path needs nothing but POSIX sh and coreutils.
if ! command -v busybox >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "scripts/test.sh: installing busybox-static" >&2
	apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
fi

exec go test -race -count=1 ./... "$@"
