#!/usr/bin/env bash
# Makes a "remote Docker host" on this machine for the remotedocker
# backend's tests: a network namespace with an address of its own, a second
# dockerd in it (own data root, socket and bridge) and sshd in it with
# generated host and user keys. Idempotent: what runs already is reused.
#
#   scripts/remote-harness.sh up       set up (or check) everything; prints
#                                      the environment file's path
#   scripts/remote-harness.sh down     stop sshd and dockerd, remove the
#                                      namespace (data root and keys stay)
#   scripts/remote-harness.sh purge    down, then remove data root and keys
#   scripts/remote-harness.sh status   exit 0 when everything is up
#   scripts/remote-harness.sh env      print the environment file
#
# The host (in the namespace sbx-remote):
#   10.250.77.2          its address (this machine: 10.250.77.1, a /30 veth)
#   sshd on :22          also on 127.0.0.1:22 inside the namespace (ProxyJump)
#                        user root, key $SBX_REMOTE_DIR/id_ed25519
#   dockerd              unix://$SBX_REMOTE_DIR/docker.sock (reached over SSH),
#                        tcp://10.250.77.2:2376 with TLS (certs in tls-client/)
#   containers           bridge 10.250.76.0/24 inside the namespace
# Only addresses inside the namespace are used; nothing leaves this machine.
#
# The test images (sandboxkit-test/busybox:1 and scratch:1) are copied from
# the local daemon (docker save | docker load), since no registry is
# reachable; scripts/docker-setup.sh builds them when they are missing.
#
# Needs root, ip (iproute2), nsenter (util-linux), dockerd, sshd and openssl;
# openssh-server is installed with apt-get when missing. Tests read the
# environment file ($SBX_REMOTE_DIR/env); internal/remotetest runs `up` when
# it is missing and skips (or fails under SBX_REQUIRE_REMOTE=1) when that
# does not work.
#
# Environment: SBX_REMOTE_DIR (default /run/sandboxkit-remote),
# SBX_REMOTE_DATA (default /var/lib/sandboxkit-remote), SBX_DOCKERD_WAIT
# seconds to wait for the daemon (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."

NETNS=sbx-remote
VETH_HOST=sbxr-host
VETH_REMOTE=sbxr-remote
HOST_ADDR=10.250.77.1
REMOTE_ADDR=10.250.77.2
PREFIX=30
BRIDGE_CIDR=10.250.76.1/24
POOL=10.250.72.0/22 # user-defined networks of the remote daemon
TLS_PORT=2376
RUN=${SBX_REMOTE_DIR:-/run/sandboxkit-remote}
DATA=${SBX_REMOTE_DATA:-/var/lib/sandboxkit-remote}
IMAGES=(sandboxkit-test/busybox:1 sandboxkit-test/scratch:1)

log() { echo "remote-harness: $*" >&2; }
die() {
	log "$*"
	exit 1
}
in_ns() { nsenter --net="/run/netns/$NETNS" "$@"; }
rdocker() { docker -H "unix://$RUN/docker.sock" "$@"; }
# alive PIDFILE NAME: the pid file names a running NAME (not a reused PID).
alive() {
	[ -s "$1" ] || return 1
	local pid
	pid=$(cat "$1")
	kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

need_tools() {
	[ "$(id -u)" = 0 ] || die "needs root (network namespaces, a second dockerd)"
	local missing=()
	command -v ip >/dev/null 2>&1 || missing+=(iproute2)
	command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
	command -v openssl >/dev/null 2>&1 || missing+=(openssl)
	[ -x /usr/sbin/sshd ] && command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-server openssh-client)
	if [ ${#missing[@]} -gt 0 ]; then
		command -v apt-get >/dev/null 2>&1 || die "needs ${missing[*]}"
		log "installing ${missing[*]}"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
	# dockerd, docker and the test images come from docker-setup.sh.
	if ! command -v dockerd >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
		log "no local Docker; running scripts/docker-setup.sh --no-debian"
		./scripts/docker-setup.sh --no-debian
	fi
}

# --- network ------------------------------------------------------------------
net_up() {
	[ -e "/run/netns/$NETNS" ] || ip netns add "$NETNS"
	if ! ip link show "$VETH_HOST" >/dev/null 2>&1; then
		ip link add "$VETH_HOST" type veth peer name "$VETH_REMOTE"
		ip link set "$VETH_REMOTE" netns "$NETNS"
	fi
	ip addr replace "$HOST_ADDR/$PREFIX" dev "$VETH_HOST"
	ip link set "$VETH_HOST" up
	in_ns ip link set lo up
	in_ns ip addr replace "$REMOTE_ADDR/$PREFIX" dev "$VETH_REMOTE"
	in_ns ip link set "$VETH_REMOTE" up
}

# --- keys and certificates -------------------------------------------------------
keys_up() {
	mkdir -p "$RUN" "$RUN/tls" "$RUN/tls-client"
	chmod 700 "$RUN"
	local k
	for k in ed25519 ecdsa; do
		[ -s "$RUN/host_$k" ] || ssh-keygen -q -t "$k" -N '' -C "sbx-remote host" -f "$RUN/host_$k"
	done
	[ -s "$RUN/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "sbx-remote user" -f "$RUN/id_ed25519"
	cp "$RUN/id_ed25519.pub" "$RUN/authorized_keys"
	# known_hosts for both the namespace address and its loopback (the
	# ProxyJump target as the jump host sees it).
	{
		echo "$REMOTE_ADDR $(cut -d' ' -f1,2 "$RUN/host_ed25519.pub")"
		echo "127.0.0.1 $(cut -d' ' -f1,2 "$RUN/host_ed25519.pub")"
	} >"$RUN/known_hosts"
	cat >"$RUN/ssh_config" <<EOF
# ssh -F $RUN/ssh_config sbx-remote
Host sbx-remote
	HostName $REMOTE_ADDR
	User root
	Port 22
	IdentityFile $RUN/id_ed25519
	UserKnownHostsFile $RUN/known_hosts
	IdentitiesOnly yes
Host sbx-remote-jumped
	HostName 127.0.0.1
	User root
	IdentityFile $RUN/id_ed25519
	UserKnownHostsFile $RUN/known_hosts
	ProxyJump sbx-remote
EOF
	tls_up
}

tls_up() {
	local d=$RUN/tls
	[ -s "$d/server-cert.pem" ] && [ -s "$RUN/tls-client/cert.pem" ] && return 0
	log "making TLS certificates"
	openssl genrsa -out "$d/ca-key.pem" 2048 2>/dev/null
	openssl req -new -x509 -days 3650 -key "$d/ca-key.pem" -subj "/CN=sandboxkit remote-harness CA" -out "$d/ca.pem" 2>/dev/null
	openssl genrsa -out "$d/server-key.pem" 2048 2>/dev/null
	openssl req -new -key "$d/server-key.pem" -subj "/CN=$REMOTE_ADDR" -out "$d/server.csr" 2>/dev/null
	printf 'subjectAltName = IP:%s\nextendedKeyUsage = serverAuth\n' "$REMOTE_ADDR" >"$d/server.ext"
	openssl x509 -req -days 3650 -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -CAcreateserial \
		-extfile "$d/server.ext" -out "$d/server-cert.pem" 2>/dev/null
	openssl genrsa -out "$RUN/tls-client/key.pem" 2048 2>/dev/null
	openssl req -new -key "$RUN/tls-client/key.pem" -subj "/CN=sandboxkit-client" -out "$d/client.csr" 2>/dev/null
	printf 'extendedKeyUsage = clientAuth\n' >"$d/client.ext"
	openssl x509 -req -days 3650 -in "$d/client.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -CAcreateserial \
		-extfile "$d/client.ext" -out "$RUN/tls-client/cert.pem" 2>/dev/null
	cp "$d/ca.pem" "$RUN/tls-client/ca.pem"
}

# --- dockerd ------------------------------------------------------------------
dockerd_up() {
	if alive "$RUN/dockerd.pid" dockerd && rdocker info >/dev/null 2>&1; then
		return 0
	fi
	mkdir -p "$DATA/docker" "$RUN/exec"
	rm -f "$RUN/dockerd.pid" # stale: dockerd refuses to start over it
	log "starting dockerd in $NETNS (log: $RUN/dockerd.log)"
	# nsenter --net only: `ip netns exec` would remount /sys and hide the
	# cgroup mounts dockerd needs.
	(cd / && exec nohup nsenter --net="/run/netns/$NETNS" dockerd \
		--data-root "$DATA/docker" --exec-root "$RUN/exec" --pidfile "$RUN/dockerd.pid" \
		-H "unix://$RUN/docker.sock" \
		-H "tcp://$REMOTE_ADDR:$TLS_PORT" --tlsverify --tlscacert "$RUN/tls/ca.pem" \
		--tlscert "$RUN/tls/server-cert.pem" --tlskey "$RUN/tls/server-key.pem" \
		--iptables=false --ip-masq=false --bip "$BRIDGE_CIDR" \
		--default-address-pool "base=$POOL,size=26" \
		--cgroup-parent sandboxkit-remote \
		>"$RUN/dockerd.log" 2>&1 </dev/null) &
	local i=0 wait_s=${SBX_DOCKERD_WAIT:-60}
	until rdocker info >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt $((wait_s * 4)) ]; then
			tail -n 30 "$RUN/dockerd.log" >&2 || true
			die "the namespace's dockerd did not answer within ${wait_s}s"
		fi
		sleep 0.25
	done
}

images_up() {
	local missing=() img
	for img in "${IMAGES[@]}"; do
		docker image inspect "$img" >/dev/null 2>&1 || missing+=("$img")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "local test images missing (${missing[*]}); running scripts/docker-setup.sh --no-debian"
		./scripts/docker-setup.sh --no-debian
	fi
	local stale=()
	for img in "${IMAGES[@]}"; do
		if [ "$(rdocker image inspect --format '{{.Id}}' "$img" 2>/dev/null || true)" != \
			"$(docker image inspect --format '{{.Id}}' "$img")" ]; then
			stale+=("$img")
		fi
	done
	if [ ${#stale[@]} -gt 0 ]; then
		log "copying ${stale[*]} to the namespace's daemon"
		docker save "${stale[@]}" | rdocker load >/dev/null
	fi
}

# --- sshd ---------------------------------------------------------------------
sshd_config() {
	cat <<EOF
# sshd of the remotedocker test host (scripts/remote-harness.sh)
ListenAddress $REMOTE_ADDR:22
ListenAddress 127.0.0.1:22
HostKey $RUN/host_ed25519
HostKey $RUN/host_ecdsa
AuthorizedKeysFile $RUN/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowStreamLocalForwarding yes
AllowTcpForwarding yes
ClientAliveInterval 30
MaxStartups 100:30:200
PidFile $RUN/sshd.pid
EOF
}

sshd_up() {
	sshd_config >"$RUN/sshd_config"
	if alive "$RUN/sshd.pid" sshd; then
		return 0
	fi
	mkdir -p /run/sshd # privilege separation directory
	log "starting sshd in $NETNS (log: $RUN/sshd.log)"
	in_ns /usr/sbin/sshd -f "$RUN/sshd_config" -E "$RUN/sshd.log"
	local i=0
	until alive "$RUN/sshd.pid" sshd; do
		i=$((i + 1))
		[ "$i" -le 40 ] || {
			tail -n 20 "$RUN/sshd.log" >&2 || true
			die "sshd did not start"
		}
		sleep 0.25
	done
}

write_env() {
	cat >"$RUN/env.tmp" <<EOF
SBX_REMOTE_NETNS=$NETNS
SBX_REMOTE_ADDR=$REMOTE_ADDR
SBX_REMOTE_HOST_ADDR=$HOST_ADDR
SBX_REMOTE_SSH_PORT=22
SBX_REMOTE_USER=root
SBX_REMOTE_KEY=$RUN/id_ed25519
SBX_REMOTE_HOST_KEYS=$RUN/host_ed25519.pub $RUN/host_ecdsa.pub
SBX_REMOTE_KNOWN_HOSTS=$RUN/known_hosts
SBX_REMOTE_SSH_CONFIG=$RUN/ssh_config
SBX_REMOTE_SSHD_CONFIG=$RUN/sshd_config
SBX_REMOTE_SSHD_PID=$(cat "$RUN/sshd.pid")
SBX_REMOTE_DOCKER_SOCKET=$RUN/docker.sock
SBX_REMOTE_TLS_HOST=tcp://$REMOTE_ADDR:$TLS_PORT
SBX_REMOTE_TLS_CERT_PATH=$RUN/tls-client
SBX_REMOTE_IMAGES=${IMAGES[*]}
EOF
	mv "$RUN/env.tmp" "$RUN/env"
}

up() {
	need_tools
	net_up
	keys_up
	dockerd_up
	images_up
	sshd_up
	write_env
	log "ready: ssh://root@$REMOTE_ADDR (remote socket $RUN/docker.sock; env: $RUN/env)"
	echo "$RUN/env"
}

stop_pid() {
	local f=$1 name=$2 i=0
	alive "$f" "$name" || return 0
	kill "$(cat "$f")" 2>/dev/null || true
	while alive "$f" "$name" && [ "$i" -lt 80 ]; do
		sleep 0.25
		i=$((i + 1))
	done
}

down() {
	rm -f "$RUN/env"
	stop_pid "$RUN/sshd.pid" sshd
	if alive "$RUN/dockerd.pid" dockerd; then
		# Containers go with their daemon; remove them so no shim outlives it.
		rdocker ps -aq 2>/dev/null | xargs -r docker -H "unix://$RUN/docker.sock" rm -f >/dev/null 2>&1 || true
	fi
	stop_pid "$RUN/dockerd.pid" dockerd
	ip link del "$VETH_HOST" 2>/dev/null || true
	[ -e "/run/netns/$NETNS" ] && ip netns del "$NETNS"
	log "down"
}

status() {
	[ -e "/run/netns/$NETNS" ] && alive "$RUN/sshd.pid" sshd && alive "$RUN/dockerd.pid" dockerd &&
		rdocker info >/dev/null 2>&1 && [ -s "$RUN/env" ]
}

case "${1:-}" in
up) up ;;
down) down ;;
purge)
	down
	rm -rf "$RUN" "$DATA"
	;;
status) status ;;
env) cat "$RUN/env" ;;
*)
	sed -n '2,36p' "$0" >&2
	exit 2
	;;
esac
