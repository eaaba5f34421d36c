#!/usr/bin/env bash
# Whole-process CLI figures: `sbx bench cli` (sbx run / sbx exec against
# docker run --rm / docker exec, alternating, medians and ratios as JSON)
# on native, lite and, when its harness is up, remotedocker. Prints figures
# only; it fails only when a bench cannot run. Needs what scripts/test.sh
# sets up (Docker with sandboxkit-test/busybox:1, runc).
# Usage: scripts/bench-cli.sh [N]   (runs per command, default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-15}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/sbx" ./cmd/sbx
image=sandboxkit-test/busybox:1

cat >"$work/native.toml" <<TOML
[sandbox]
backend = "native"
[sandbox.sandboxes.main]
image = "$image"
TOML
# lite unpacks the same image from a docker save archive.
docker save "$image" -o "$work/busybox.tar"
cat >"$work/lite.toml" <<TOML
[sandbox]
backend = "lite"
[sandbox.sandboxes.main]
image = "docker-archive:$work/busybox.tar"
TOML
configs=(native lite)

env=/run/sandboxkit-remote/env
if [ -r "$env" ]; then
	addr=$(sed -n 's/^SBX_REMOTE_ADDR=//p' "$env")
	key=$(sed -n 's/^SBX_REMOTE_KEY=//p' "$env")
	known=$(sed -n 's/^SBX_REMOTE_KNOWN_HOSTS=//p' "$env")
	socket=$(sed -n 's/^SBX_REMOTE_DOCKER_SOCKET=//p' "$env")
	cat >"$work/remotedocker.toml" <<TOML
[sandbox]
backend = "remotedocker"
docker_host = "ssh://root@$addr"
[sandbox.remotedocker]
identity_file = "$key"
known_hosts = "$known"
ssh_config = "none"
remote_socket = "$socket"
pull_policy = "never"
[sandbox.sandboxes.main]
image = "$image"
TOML
	configs+=(remotedocker)
fi

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for c in "${configs[@]}"; do
	echo "== sbx bench cli --n $n ($c)"
	"$work/sbx" --config "$work/$c.toml" --progress none bench cli --n "$n" --json 2>/dev/null
done
