#!/usr/bin/env bash
# Builds a current gVisor release's runsc from gVisor's own Go module (the
# module proxy serves it; no other download) and installs it, static, as
# /usr/local/sbin/runsc-20260905: beside Debian's runsc (2022-12), not in
# its place. lite and native take a runtime named runsc-SOMETHING for
# gVisor (lite: [sandbox.lite] runtime = "runsc-20260905"; native: the
# name it is registered under with the engine, which scripts/docker-setup.sh
# does).
#
# Why a second gVisor: Debian's runs only on the ptrace platform here (no
# KVM), where every system call of the sandbox is a round trip through
# ptrace (about 40 us on these machines); the release's default platform,
# systrap, costs about a tenth of that. See docs/isolation.md.
#
# Prints the installed path. Needs root (it writes /usr/local/sbin) and Go.
set -euo pipefail

version=v0.0.0-20260905035102-160fafc42237 # gVisor's go branch, release 20260905
dest=${SBX_GVISOR_RELEASE_PATH:-/usr/local/sbin/runsc-20260905}

if [ -x "$dest" ]; then
	echo "$dest"
	exit 0
fi
if [ "$(id -u)" != 0 ] && [ ! -w "$(dirname "$dest")" ]; then
	echo "gvisor-release: $dest needs root to install (or set SBX_GVISOR_RELEASE_PATH to a folder of yours)" >&2
	exit 1
fi
if ! command -v go >/dev/null 2>&1; then
	echo "gvisor-release: the Go toolchain is needed to build runsc" >&2
	exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "gvisor-release: building runsc $version from gvisor.dev/gvisor (about a minute)" >&2
# Static (CGO_ENABLED=0): runsc re-executes itself inside the chroot it
# makes, where no dynamic loader is.
(cd "$work" && CGO_ENABLED=0 GOBIN="$work/bin" GOFLAGS= go install "gvisor.dev/gvisor/runsc@$version") >&2
install -m 0755 "$work/bin/runsc" "$dest.tmp"
mv -f "$dest.tmp" "$dest"
echo "$dest"
