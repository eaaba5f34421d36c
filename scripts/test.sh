#!/usr/bin/env bash
# Runs sandboxkit's tests, after setting up what they need on this machine.
# Extra arguments go to `go test` (e.g. -run TestX, -v).
#
# The native backend's suites need a Docker daemon and local test images:
# scripts/docker-setup.sh installs Debian's docker.io, starts dockerd when no
# daemon answers and builds the images (no registry needed). Without Docker
# those tests skip, unless SBX_REQUIRE_DOCKER=1 (as in CI) makes them fail.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1; then
	echo "scripts/test.sh: the Go toolchain (1.26+) is needed: https://go.dev/dl/" >&2
	exit 1
fi

if ! ./scripts/docker-setup.sh; then
	if [ "${SBX_REQUIRE_DOCKER:-}" = 1 ]; then
		echo "scripts/test.sh: Docker setup failed and SBX_REQUIRE_DOCKER=1" >&2
		exit 1
	fi
	echo "scripts/test.sh: no Docker; the Docker tests will skip" >&2
fi

# remotedocker: a "remote host" in a network namespace (second dockerd + sshd).
if ! ./scripts/remote-harness.sh up >/dev/null; then
	if [ "${SBX_REQUIRE_REMOTE:-}" = 1 ]; then
		echo "scripts/test.sh: remote harness setup failed and SBX_REQUIRE_REMOTE=1" >&2
		exit 1
	fi
	echo "scripts/test.sh: no remote harness; the remotedocker tests will skip" >&2
fi

# k8s: a one-node cluster (etcd, kube-apiserver, controller-manager, scheduler;
# containerd + kubelet in a netns). The first run on a machine builds the
# Kubernetes binaries (several minutes; cached in /var/cache/sandboxkit-k8s).
if ! ./scripts/k8s-harness.sh up >/dev/null; then
	if [ "${SBX_REQUIRE_K8S:-}" = 1 ]; then
		echo "scripts/test.sh: k8s harness setup failed and SBX_REQUIRE_K8S=1" >&2
		exit 1
	fi
	echo "scripts/test.sh: no k8s harness; the k8s tests will skip" >&2
fi

# lite: runc, overlayfs and busybox for its rootfs.
if ! ./scripts/lite-setup.sh; then
	if [ "${SBX_REQUIRE_LITE:-}" = 1 ]; then
		echo "scripts/test.sh: lite setup failed and SBX_REQUIRE_LITE=1" >&2
		exit 1
	fi
	echo "scripts/test.sh: no OCI runtime; the lite tests will skip" >&2
fi

# chromium: the operator's console is tested in a real (headless) browser
# (server's TestConsoleInBrowser, through the DevTools protocol).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "scripts/test.sh: installing chromium (headless browser for the console's test)" >&2
	apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null ||
		echo "scripts/test.sh: installing chromium failed; the console's browser test will skip" >&2
fi

# busybox: the fileops table also runs with busybox as the only tools on
# PATH, proving the generic path needs nothing but POSIX sh and coreutils.
if ! command -v busybox >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "scripts/test.sh: installing busybox-static" >&2
	apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
fi

# bubblewrap: the example backend of examples/bubblewrap runs commands
# with bwrap.
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "scripts/test.sh: installing bubblewrap" >&2
	apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null || true
fi

# Podman: the native backend's core suites run a second time against
# Podman's Docker-compatible API (scripts/podman-setup.sh), after the main
# run, when no arguments narrow the run.
podman_host=""
if [ $# -eq 0 ] && [ "${SBX_PODMAN:-1}" != 0 ]; then
	if ! podman_host=$(./scripts/podman-setup.sh); then
		podman_host=""
		if [ "${SBX_REQUIRE_PODMAN:-}" = 1 ]; then
			echo "scripts/test.sh: Podman setup failed and SBX_REQUIRE_PODMAN=1" >&2
			exit 1
		fi
		echo "scripts/test.sh: no Podman; the native suites run on Docker only" >&2
	fi
fi

rc=0
# An explicit timeout per package, with a margin over the slowest (the k8s
# and native packages, a few minutes each under -race on 2 cores); then
# each package's time, slowest first, so that growth shows.
log=$(mktemp)
# The slowest packages first (measured, CI run of 2026-12-02): go test
# starts the packages in the order it is given them, two at a time on 2
# cores, and one of several minutes started last ran alone at the end.
mod=$(go list -m)
all=$(go list ./...)
pkgs=()
for p in backends/native backends/k8s server backends/lite internal/cli backends/remotedocker session sbxd; do
	grep -qxF "$mod/$p" <<<"$all" && pkgs+=("$mod/$p")
done
while IFS= read -r p; do
	case " ${pkgs[*]} " in *" $p "*) ;; *) pkgs+=("$p") ;; esac
done <<<"$all"
go test -race -count=1 -timeout 25m "${pkgs[@]}" "$@" 2>&1 | tee "$log" || rc=$?
echo "== package test times (slowest first)"
awk '$1 == "ok" || $1 == "FAIL" { if ($3 ~ /s$/) print $3, $2 }' "$log" | sort -rn | head -15
rm -f "$log"
if [ -n "$podman_host" ]; then
	echo "== native backend on Podman ($podman_host)"
	podman_log=$(mktemp)
	podman_pass() {
		DOCKER_HOST=$podman_host go test -race -count=1 -run "$1" ./backends/native/ 2>&1 | tee "$podman_log"
	}
	podman_rc=0
	podman_pass '^(TestConformanceBusybox|TestScratchImage|TestCheckpoint|TestSharedVolume|TestBuild|TestLabelsAndInfo|TestClaim.*|TestPruneClaimRecords)$' || podman_rc=$?
	# Podman's builder now and then has a RUN step's runtime killed with
	# no reason given ("while running runtime: signal: killed", in TestBuild
	# twice in CI here; containers/podman#17918, "random signal: killed
	# when building"). Only then, the tests that failed run once more.
	if [ "$podman_rc" != 0 ] && grep -q 'while running runtime: signal: killed' "$podman_log"; then
		again=$(grep -oE '^--- FAIL: Test[A-Za-z0-9_]+' "$podman_log" | awk '{print $3}' | sort -u | paste -sd'|')
		if [ -n "$again" ]; then
			echo "== Podman killed a build step's runtime (containers/podman#17918): $again once more"
			podman_rc=0
			podman_pass "^($again)\$" || podman_rc=$?
		fi
	fi
	if [ "$podman_rc" != 0 ]; then
		rc=$podman_rc
		# What Podman said about the failure.
		echo "== last lines of the Podman service's log" >&2
		tail -n 40 "${SBX_PODMAN_DIR:-/run/sandboxkit-podman}/service.log" >&2 || true
	fi
	rm -f "$podman_log"
fi
# lite on gVisor: its conformance suite a second time with runsc as the
# OCI runtime, and its kills at any moment (lite makes the cgroup runsc
# runs in) (without -race, which the main run gave lite's code on runc:
# this pass is about the runtime).
gvisor_release=${SBX_GVISOR_RELEASE_PATH:-/usr/local/sbin/runsc-20260905}
if [ $# -eq 0 ]; then
	if command -v runsc >/dev/null 2>&1 || [ -x /usr/sbin/runsc ]; then
		echo "== lite backend on gVisor (runsc)"
		# The fileops table (3 of this pass's 5 minutes on a 2-core
		# Firecracker guest) runs on the release below and on Debian's
		# runsc in native's pass: each build has it once.
		SBX_LITE_RUNTIME=runsc go test -count=1 -timeout 10m -run '^(TestConformance|TestForkStandby.*|TestStandbyMadeAtLowPriority|TestAheadMadeAtLowPriority|TestKilledMidway|TestRuntimeStartsWarmTheCgroupLock)$' ./backends/lite/ || rc=$?
	elif [ "${SBX_REQUIRE_RUNSC:-}" = 1 ]; then
		echo "scripts/test.sh: no runsc for lite's gVisor pass and SBX_REQUIRE_RUNSC=1 (scripts/lite-setup.sh installs Debian's)" >&2
		rc=1
	else
		echo "scripts/test.sh: no runsc; lite's gVisor pass skips" >&2
	fi
	# ... and on a current gVisor release beside Debian's (systrap platform;
	# scripts/gvisor-release.sh builds it from gVisor's module).
	if [ -x "$gvisor_release" ]; then
		echo "== lite backend on gVisor's release ($(basename "$gvisor_release"))"
		SBX_LITE_RUNTIME=$gvisor_release go test -count=1 -timeout 10m -run '^(TestConformance|TestFileops|TestForkStandby.*|TestClaimKeepsConcurrentWrites|TestStandbyMadeAtLowPriority|TestAheadMadeAtLowPriority|TestRuntimeStartsWarmTheCgroupLock)$' ./backends/lite/ || rc=$?
	elif [ "${SBX_REQUIRE_RUNSC:-}" = 1 ]; then
		echo "scripts/test.sh: no $gvisor_release for lite's pass on gVisor's release and SBX_REQUIRE_RUNSC=1 (scripts/gvisor-release.sh builds it)" >&2
		rc=1
	else
		echo "scripts/test.sh: no $gvisor_release; lite's pass on gVisor's release skips" >&2
	fi
	# native on gVisor: its conformance, fileops and egress suites with
	# runtime = "gvisor" (runsc registered with dockerd by
	# scripts/docker-setup.sh), then on the release, which docker-setup
	# registers under its file name. With SBX_NATIVE_RUNTIME set the file
	# cases run through the agent only, not again with the capabilities
	# hidden (native_test.go's runtimePass).
	native_gvisor_pass() { # ENGINE-RUNTIME SBX_NATIVE_RUNTIME LABEL TESTS
		if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q "\"$1\""; then
			echo "== native backend on $3"
			SBX_NATIVE_RUNTIME=$2 go test -count=1 -timeout 10m -run "^($4)\$" ./backends/native/ || rc=$?
		elif [ "${SBX_REQUIRE_RUNSC:-}" = 1 ]; then
			echo "scripts/test.sh: dockerd has no $1 runtime for native's pass on $3 and SBX_REQUIRE_RUNSC=1 (scripts/docker-setup.sh registers it)" >&2
			rc=1
		else
			echo "scripts/test.sh: dockerd has no $1 runtime; native's pass on $3 skips" >&2
		fi
	}
	native_gvisor_pass runsc gvisor "gVisor (runsc)" 'TestConformanceBusybox|TestFileopsBusybox|TestEgress.*'
	# The release runs the suites that exercise its platform and file
	# system (systrap in place of ptrace); the egress suite runs on
	# Debian's above only: docker-setup registers both with --network=host,
	# so under either the sandbox's traffic takes the host kernel's stack in
	# its own namespace, which the enforcer governs as it does runc's (the
	# release's egress pass was about two minutes of an hour-long CI run).
	# The release's native pass (conformance and fileops, 7.5 minutes on a
	# Firecracker guest whose whole CI run came to the 90-minute limit) runs
	# only with SBX_NATIVE_GVISOR_RELEASE=1; lite's pass on the release above
	# and the gate's native-gvisor-release pairs run it in CI.
	if [ "${SBX_NATIVE_GVISOR_RELEASE:-}" = 1 ]; then
		release_name=$(basename "$gvisor_release")
		native_gvisor_pass "$release_name" "$release_name" "gVisor's release ($release_name)" 'TestConformanceBusybox|TestFileopsBusybox'
	fi
fi
# examples/bubblewrap: a backend in a module of its own, with public
# packages only, through both suites (plain and through sbxd).
if [ $# -eq 0 ]; then
	echo "== examples/bubblewrap (its own module)"
	(cd examples/bubblewrap && go test -race -count=1 -timeout 10m ./...) || rc=$?
fi
exit $rc
