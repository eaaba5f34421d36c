#!/usr/bin/env bash
# Makes a one-node Kubernetes cluster on this machine for the k8s backend's
# tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
# this machine, and containerd (CRI) with a kubelet in a network namespace
# (kubelet refuses a loopback node address). Idempotent: what runs already is
# reused, so `up` before every test run costs about a second.
#
#   scripts/k8s-harness.sh up       build (or reuse) the binaries, start
#                                   everything, wait for a Ready node;
#                                   prints the environment file's path
#   scripts/k8s-harness.sh down     stop everything, kill the pods' containers,
#                                   remove the namespace and the cluster's
#                                   state (built binaries and images stay)
#   scripts/k8s-harness.sh status   exit 0 when everything is up
#   scripts/k8s-harness.sh env      print the environment file
#   scripts/k8s-harness.sh build    only build (or find) the binaries
#   scripts/k8s-harness.sh restart-apiserver
#                                   stop and start kube-apiserver (fault tests)
#
# The node (network namespace sbx-k8s):
#   10.248.0.1           this machine's end of a /30 veth: the apiserver
#                        listens here (:6443, TLS, client certificates)
#   10.248.0.2           the node's address (kubelet :10250)
#   10.248.1.0/24        pod addresses (CNI bridge inside the namespace; a
#                        default route via the bridge lets pods reach the
#                        node's addresses, as on real clusters; the bridge
#                        plugin does not enforce NetworkPolicies); this
#                        machine routes them via the node's address
#   10.248.128.0/24      service addresses (no kube-proxy: never routed)
# Only addresses inside the namespace are used; nothing leaves this machine.
#
# Binaries: kube-apiserver, kube-controller-manager, kube-scheduler and
# kubelet are built from k8s.io/kubernetes by the module in tools/k8s (about
# 5-10 minutes cold on 2 cores) into $SBX_K8S_CACHE/bin-<hash>, the hash
# covering tools/k8s/go.mod, go.sum and the Go release; later runs reuse
# them. etcd, containerd, runc and the CNI plugins are Debian's packages
# (installed with apt-get when missing).
#
# Images: the test images (sandboxkit-test/busybox:1 and debian:1, built by
# scripts/docker-setup.sh) and a pause image made here from busybox-static
# are copied from the local Docker into containerd (docker save | ctr
# import); pods use them with imagePullPolicy IfNotPresent.
#
# Kubeconfigs (in the environment file, $SBX_K8S_DIR/env):
#   SBX_K8S_KUBECONFIG          cluster admin (group system:masters)
#   SBX_K8S_NOPERM_KUBECONFIG   an authenticated user with no RBAC rights
#
# Environment: SBX_K8S_DIR (runtime state, default /run/sandboxkit-k8s),
# SBX_K8S_DATA (containerd's images, default /var/lib/sandboxkit-k8s),
# SBX_K8S_CACHE (built binaries, default /var/cache/sandboxkit-k8s),
# SBX_K8S_WAIT seconds to wait for each component (default 180).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

NETNS=sbx-k8s
VETH_HOST=sbxk8s-host
VETH_NODE=sbxk8s-node
HOST_ADDR=10.248.0.1
NODE_ADDR=10.248.0.2
PREFIX=30
POD_CIDR=10.248.1.0/24
SERVICE_CIDR=10.248.128.0/24
SERVICE_IP=10.248.128.1
NODE_NAME=sbx-node
API_PORT=6443
ETCD_CLIENT=127.0.0.1:12379
ETCD_PEER=127.0.0.1:12380
RUN=${SBX_K8S_DIR:-/run/sandboxkit-k8s}
DATA=${SBX_K8S_DATA:-/var/lib/sandboxkit-k8s}
CACHE=${SBX_K8S_CACHE:-/var/cache/sandboxkit-k8s}
WAIT_S=${SBX_K8S_WAIT:-180}
PAUSE_IMAGE=sandboxkit-test/pause:1
IMAGES=(sandboxkit-test/busybox:1 sandboxkit-test/debian:1)
SOCK=$RUN/containerd/containerd.sock

log() { echo "k8s-harness: $*" >&2; }
die() {
	log "$*"
	exit 1
}
in_ns() { nsenter --net="/run/netns/$NETNS" "$@"; }
ctrk() { ctr --address "$SOCK" -n k8s.io "$@"; }
# alive PIDFILE NAME: the pid file names a running NAME (not a reused PID).
alive() {
	[ -s "$1" ] || return 1
	local pid
	pid=$(cat "$1")
	kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}
# api PATH: GET from the apiserver as the admin; prints the body.
api() {
	curl -sf --max-time 10 --cacert "$RUN/pki/ca.pem" --cert "$RUN/pki/admin.pem" --key "$RUN/pki/admin-key.pem" \
		"https://$HOST_ADDR:$API_PORT$1"
}
# wait_for WHAT LOGFILE CMD...: poll CMD until it succeeds or WAIT_S passes.
wait_for() {
	local what=$1 logf=$2 i=0
	shift 2
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt $((WAIT_S * 2)) ]; then
			[ -n "$logf" ] && tail -n 40 "$logf" >&2
			die "$what not ready within ${WAIT_S}s${logf:+ (log: $logf)}"
		fi
		sleep 0.5
	done
}

need_tools() {
	[ "$(id -u)" = 0 ] || die "needs root (network namespace, containerd, kubelet)"
	local missing=()
	command -v ip >/dev/null 2>&1 || missing+=(iproute2)
	command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
	command -v openssl >/dev/null 2>&1 || missing+=(openssl)
	command -v curl >/dev/null 2>&1 || missing+=(curl)
	command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
	command -v containerd >/dev/null 2>&1 || missing+=(containerd)
	command -v runc >/dev/null 2>&1 || missing+=(runc)
	[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
	[ -x /bin/busybox ] || missing+=(busybox-static)
	command -v conntrack >/dev/null 2>&1 || missing+=(conntrack)
	command -v iptables >/dev/null 2>&1 || missing+=(iptables)
	if [ ${#missing[@]} -gt 0 ]; then
		command -v apt-get >/dev/null 2>&1 || die "needs ${missing[*]}"
		log "installing ${missing[*]}"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	fi
	command -v go >/dev/null 2>&1 || die "needs the Go toolchain to build the Kubernetes binaries"
}

# --- binaries -------------------------------------------------------------------
BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)

bin_dir() {
	local hash
	hash=$({ cat tools/k8s/go.mod tools/k8s/go.sum; go env GOVERSION; } | sha256sum | cut -c1-16)
	echo "$CACHE/bin-$hash"
}

build() {
	local dir
	dir=$(bin_dir)
	local b ok=1
	for b in "${BINS[@]}"; do [ -x "$dir/$b" ] || ok=0; done
	if [ "$ok" = 1 ]; then
		echo "$dir"
		return 0
	fi
	log "building ${BINS[*]} from k8s.io/kubernetes into $dir (several minutes the first time)"
	mkdir -p "$CACHE"
	local tmp
	tmp=$(mktemp -d "$CACHE/build.XXXXXX")
	local pkgs=()
	for b in "${BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
	if ! (cd tools/k8s && go build -trimpath -ldflags='-s -w' -o "$tmp/" "${pkgs[@]}") >"$tmp.log" 2>&1; then
		tail -n 40 "$tmp.log" >&2
		rm -rf "$tmp"
		die "building the Kubernetes binaries failed (log: $tmp.log)"
	fi
	rm -f "$tmp.log"
	# A concurrent build may have finished first: keep one.
	if ! mv -T "$tmp" "$dir" 2>/dev/null; then rm -rf "$tmp"; fi
	echo "$dir"
}

# --- network ------------------------------------------------------------------
net_up() {
	[ -e "/run/netns/$NETNS" ] || ip netns add "$NETNS"
	if ! ip link show "$VETH_HOST" >/dev/null 2>&1; then
		ip link add "$VETH_HOST" type veth peer name "$VETH_NODE"
		ip link set "$VETH_NODE" netns "$NETNS"
	fi
	ip addr replace "$HOST_ADDR/$PREFIX" dev "$VETH_HOST"
	ip link set "$VETH_HOST" up
	in_ns ip link set lo up
	in_ns ip addr replace "$NODE_ADDR/$PREFIX" dev "$VETH_NODE"
	in_ns ip link set "$VETH_NODE" up
	# kubelet wants a default route to pick its node address from.
	in_ns ip route replace default via "$HOST_ADDR" dev "$VETH_NODE"
	# This machine reaches pod addresses through the node, as a client on
	# a cluster's network does (the k8s backend's direct agent connects
	# there; it goes through the API server where no route leads).
	ip route replace "$POD_CIDR" via "$NODE_ADDR" dev "$VETH_HOST"
}

# --- certificates ---------------------------------------------------------------
# cert NAME SUBJECT EXT: a key and certificate signed by the harness CA.
cert() {
	local d=$RUN/pki
	[ -s "$d/$1.pem" ] && return 0
	openssl genrsa -out "$d/$1-key.pem" 2048 2>/dev/null
	openssl req -new -key "$d/$1-key.pem" -subj "$2" -out "$d/$1.csr" 2>/dev/null
	printf '%b' "$3" >"$d/$1.ext"
	openssl x509 -req -days 3650 -in "$d/$1.csr" -CA "$d/ca.pem" -CAkey "$d/ca-key.pem" -CAcreateserial \
		-extfile "$d/$1.ext" -out "$d/$1.pem" 2>/dev/null
}

# kubeconfig FILE CERTNAME: a kubeconfig with the certificate embedded.
kubeconfig() {
	local d=$RUN/pki
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sbx-k8s
  cluster:
    server: https://$HOST_ADDR:$API_PORT
    certificate-authority-data: $(base64 -w0 "$d/ca.pem")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$d/$2.pem")
    client-key-data: $(base64 -w0 "$d/$2-key.pem")
contexts:
- name: sbx-k8s
  context: {cluster: sbx-k8s, user: $2}
current-context: sbx-k8s
EOF
	chmod 600 "$1"
}

pki_up() {
	local d=$RUN/pki
	mkdir -p "$d"
	chmod 700 "$RUN" "$d"
	if [ ! -s "$d/ca.pem" ]; then
		log "making certificates"
		openssl genrsa -out "$d/ca-key.pem" 2048 2>/dev/null
		openssl req -new -x509 -days 3650 -key "$d/ca-key.pem" -subj "/CN=sandboxkit k8s-harness CA" -out "$d/ca.pem" 2>/dev/null
		openssl genrsa -out "$d/sa-key.pem" 2048 2>/dev/null
		openssl rsa -in "$d/sa-key.pem" -pubout -out "$d/sa.pem" 2>/dev/null
	fi
	cert apiserver "/CN=kube-apiserver" \
		"subjectAltName = IP:$HOST_ADDR, IP:$SERVICE_IP, IP:127.0.0.1, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc\nextendedKeyUsage = serverAuth\n"
	# Every component is a cluster admin: this is a test cluster.
	cert admin "/O=system:masters/CN=sbx-admin" "extendedKeyUsage = clientAuth\n"
	cert noperm "/CN=sbx-noperm" "extendedKeyUsage = clientAuth\n"
	[ -s "$RUN/admin.kubeconfig" ] || kubeconfig "$RUN/admin.kubeconfig" admin
	[ -s "$RUN/noperm.kubeconfig" ] || kubeconfig "$RUN/noperm.kubeconfig" noperm
}

# --- control plane ----------------------------------------------------------------
etcd_up() {
	alive "$RUN/etcd.pid" etcd && return 0
	log "starting etcd (log: $RUN/etcd.log)"
	mkdir -p "$RUN/etcd"
	chmod 700 "$RUN/etcd"
	(cd / && exec nohup etcd --name sbx-k8s --data-dir "$RUN/etcd" \
		--listen-client-urls "http://$ETCD_CLIENT" --advertise-client-urls "http://$ETCD_CLIENT" \
		--listen-peer-urls "http://$ETCD_PEER" --initial-advertise-peer-urls "http://$ETCD_PEER" \
		--initial-cluster "sbx-k8s=http://$ETCD_PEER" \
		--unsafe-no-fsync --quota-backend-bytes 1073741824 \
		>"$RUN/etcd.log" 2>&1 </dev/null) &
	echo $! >"$RUN/etcd.pid"
	wait_for etcd "$RUN/etcd.log" curl -sf --max-time 2 "http://$ETCD_CLIENT/health"
}

apiserver_up() {
	local bins=$1
	if ! alive "$RUN/apiserver.pid" kube-apiserver; then
		log "starting kube-apiserver (log: $RUN/apiserver.log)"
		(cd / && exec nohup "$bins/kube-apiserver" \
			--etcd-servers "http://$ETCD_CLIENT" \
			--bind-address "$HOST_ADDR" --advertise-address "$HOST_ADDR" --secure-port "$API_PORT" \
			--tls-cert-file "$RUN/pki/apiserver.pem" --tls-private-key-file "$RUN/pki/apiserver-key.pem" \
			--client-ca-file "$RUN/pki/ca.pem" \
			--service-cluster-ip-range "$SERVICE_CIDR" \
			--service-account-issuer https://kubernetes.default.svc \
			--service-account-key-file "$RUN/pki/sa.pem" \
			--service-account-signing-key-file "$RUN/pki/sa-key.pem" \
			--authorization-mode RBAC --allow-privileged=true \
			--kubelet-client-certificate "$RUN/pki/admin.pem" --kubelet-client-key "$RUN/pki/admin-key.pem" \
			--kubelet-preferred-address-types InternalIP \
			--profiling=false --v=1 \
			>"$RUN/apiserver.log" 2>&1 </dev/null) &
		echo $! >"$RUN/apiserver.pid"
	fi
	wait_for kube-apiserver "$RUN/apiserver.log" api /readyz
}

controllers_up() {
	local bins=$1
	if ! alive "$RUN/controller-manager.pid" kube-controller; then
		log "starting kube-controller-manager (log: $RUN/controller-manager.log)"
		(cd / && exec nohup "$bins/kube-controller-manager" \
			--kubeconfig "$RUN/admin.kubeconfig" --leader-elect=false \
			--service-account-private-key-file "$RUN/pki/sa-key.pem" --root-ca-file "$RUN/pki/ca.pem" \
			--cluster-cidr "$POD_CIDR" --service-cluster-ip-range "$SERVICE_CIDR" \
			--controllers '*' \
			--enable-hostpath-provisioner \
			--bind-address 127.0.0.1 --secure-port 0 --v=1 \
			>"$RUN/controller-manager.log" 2>&1 </dev/null) &
		echo $! >"$RUN/controller-manager.pid"
	fi
	if ! alive "$RUN/scheduler.pid" kube-scheduler; then
		log "starting kube-scheduler (log: $RUN/scheduler.log)"
		(cd / && exec nohup "$bins/kube-scheduler" \
			--kubeconfig "$RUN/admin.kubeconfig" --leader-elect=false \
			--bind-address 127.0.0.1 --secure-port 0 --v=1 \
			>"$RUN/scheduler.log" 2>&1 </dev/null) &
		echo $! >"$RUN/scheduler.pid"
	fi
}

# storageclass_up: the default StorageClass, served by the controller-manager's
# test-only hostPath provisioner (directories under /tmp/hostpath_pv on this
# machine, which is the node), so claims bind as on a real cluster.
storageclass_up() {
	api /apis/storage.k8s.io/v1/storageclasses/sbx-hostpath >/dev/null 2>&1 && return 0
	curl -sf --max-time 10 --cacert "$RUN/pki/ca.pem" --cert "$RUN/pki/admin.pem" --key "$RUN/pki/admin-key.pem" \
		-H 'Content-Type: application/json' -X POST "https://$HOST_ADDR:$API_PORT/apis/storage.k8s.io/v1/storageclasses" \
		-d '{"apiVersion":"storage.k8s.io/v1","kind":"StorageClass","metadata":{"name":"sbx-hostpath","annotations":{"storageclass.kubernetes.io/is-default-class":"true"}},"provisioner":"kubernetes.io/host-path","reclaimPolicy":"Delete","volumeBindingMode":"Immediate"}' \
		>/dev/null || die "creating the StorageClass sbx-hostpath failed"
}

# --- node -------------------------------------------------------------------------
containerd_up() {
	alive "$RUN/containerd.pid" containerd && [ -S "$SOCK" ] && return 0
	mkdir -p "$RUN/containerd" "$DATA/containerd" "$RUN/cni/net.d" "$RUN/cni/ipam"
	cat >"$RUN/containerd/config.toml" <<EOF
version = 2
root = "$DATA/containerd"
state = "$RUN/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$RUN/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/$PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE on these machines: runc would fail with
  # "can't get final child's PID".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN/cni/net.d"
EOF
	cat >"$RUN/cni/net.d/10-sbx-k8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sbx-k8s",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "sbxk8s0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$RUN/cni/ipam"
      }
    }
  ]
}
EOF
	log "starting containerd in $NETNS (log: $RUN/containerd.log)"
	# nsenter --net only: `ip netns exec` would remount /sys and hide the
	# cgroup mounts containerd and kubelet need.
	(cd / && exec nohup nsenter --net="/run/netns/$NETNS" containerd --config "$RUN/containerd/config.toml" \
		>"$RUN/containerd.log" 2>&1 </dev/null) &
	echo $! >"$RUN/containerd.pid"
	# nsenter execs containerd, so the pid is containerd's.
	wait_for containerd "$RUN/containerd.log" ctrk version
}

# import_image NAME: copy NAME from the local Docker into containerd when its
# Docker ID changed since the last import.
import_image() {
	local id stamp
	id=$(docker image inspect --format '{{.Id}}' "$1")
	stamp=$DATA/imported/$(echo "$1" | tr '/:' '__')
	if [ "$(cat "$stamp" 2>/dev/null || true)" = "$id" ] && ctrk images ls -q | grep -qx "docker.io/$1"; then
		return 0
	fi
	log "importing $1 into containerd"
	mkdir -p "$DATA/imported"
	docker save "$1" | ctrk images import - >/dev/null
	echo "$id" >"$stamp"
}

images_up() {
	if ! docker info >/dev/null 2>&1 || ! docker image inspect "${IMAGES[@]}" >/dev/null 2>&1; then
		log "local test images missing; running scripts/docker-setup.sh"
		./scripts/docker-setup.sh
	fi
	if ! docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1; then
		log "building $PAUSE_IMAGE"
		local root
		root=$(mktemp -d)
		mkdir -p "$root/bin"
		cp /bin/busybox "$root/bin/busybox"
		tar -C "$root" --numeric-owner --owner=0 --group=0 -c . |
			docker import --change 'ENTRYPOINT ["/bin/busybox", "sh", "-c", "trap \"exit 0\" TERM INT; while :; do /bin/busybox sleep 3600 & wait; done"]' \
				- "$PAUSE_IMAGE" >/dev/null
		rm -rf "$root"
	fi
	local img
	for img in "$PAUSE_IMAGE" "${IMAGES[@]}"; do import_image "$img"; done
}

kubelet_up() {
	local bins=$1
	alive "$RUN/kubelet.pid" kubelet && return 0
	mkdir -p "$RUN/kubelet" "$RUN/pod-logs"
	cat >"$RUN/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_ADDR
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://$SOCK
podLogsDir: $RUN/pod-logs
# These machines: cgroup v1 managed by hand, no swap accounting.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
# Test cluster only: the apiserver is the one caller.
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
# The machine is shared: never evict or collect the imported images.
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
resolvConf: ""
maxPods: 110
EOF
	log "starting kubelet in $NETNS (log: $RUN/kubelet.log)"
	(cd / && exec nohup nsenter --net="/run/netns/$NETNS" "$bins/kubelet" \
		--config "$RUN/kubelet/config.yaml" --kubeconfig "$RUN/admin.kubeconfig" \
		--root-dir "$RUN/kubelet" --cert-dir "$RUN/kubelet/pki" \
		--hostname-override "$NODE_NAME" --node-ip "$NODE_ADDR" --v=1 \
		>"$RUN/kubelet.log" 2>&1 </dev/null) &
	echo $! >"$RUN/kubelet.pid"
}

node_ready() {
	api "/api/v1/nodes/$NODE_NAME" | grep -q '"type":"Ready","status":"True"' ||
		api "/api/v1/nodes/$NODE_NAME" | tr -d ' \n' | grep -q '"type":"Ready","status":"True"'
}

write_env() {
	cat >"$RUN/env" <<EOF
SBX_K8S_KUBECONFIG=$RUN/admin.kubeconfig
SBX_K8S_NOPERM_KUBECONFIG=$RUN/noperm.kubeconfig
SBX_K8S_SERVER=https://$HOST_ADDR:$API_PORT
SBX_K8S_NODE=$NODE_NAME
SBX_K8S_APISERVER_PIDFILE=$RUN/apiserver.pid
SBX_K8S_NETNS=$NETNS
SBX_K8S_POD_CIDR=$POD_CIDR
EOF
}

up() {
	need_tools
	local bins
	bins=$(build)
	mkdir -p "$RUN" "$DATA"
	net_up
	pki_up
	etcd_up
	apiserver_up "$bins"
	controllers_up "$bins"
	storageclass_up
	containerd_up
	images_up
	kubelet_up "$bins"
	# A restarted cluster still has the node's old Ready status: ask kubelet.
	wait_for kubelet "$RUN/kubelet.log" in_ns curl -sf --max-time 2 http://127.0.0.1:10248/healthz
	wait_for "node $NODE_NAME" "$RUN/kubelet.log" node_ready
	wait_for "the default service account" "$RUN/controller-manager.log" api /api/v1/namespaces/default/serviceaccounts/default
	write_env
	echo "$RUN/env"
}

# stop PIDFILE NAME: SIGTERM the process the pid file names, then SIGKILL.
stop() {
	alive "$1" "$2" || {
		rm -f "$1"
		return 0
	}
	local pid i=0
	pid=$(cat "$1")
	kill "$pid" 2>/dev/null || true
	while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 40 ]; do
		sleep 0.25
		i=$((i + 1))
	done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$1"
}

down() {
	[ "$(id -u)" = 0 ] || die "needs root"
	stop "$RUN/kubelet.pid" kubelet
	stop "$RUN/scheduler.pid" kube-scheduler
	stop "$RUN/controller-manager.pid" kube-controller
	stop "$RUN/apiserver.pid" kube-apiserver
	stop "$RUN/etcd.pid" etcd
	if alive "$RUN/containerd.pid" containerd; then
		# The pods' containers outlive containerd (their shims): end them.
		local c
		for c in $(ctrk tasks ls -q 2>/dev/null); do ctrk tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
		sleep 1
		for c in $(ctrk tasks ls -q 2>/dev/null); do ctrk tasks delete -f "$c" >/dev/null 2>&1 || true; done
		for c in $(ctrk containers ls -q 2>/dev/null); do ctrk containers delete "$c" >/dev/null 2>&1 || true; done
	fi
	stop "$RUN/containerd.pid" containerd
	# Shims this harness's containerd started (their -address is our socket).
	local p
	for p in /proc/[0-9]*; do
		if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "-address $SOCK "; then
			kill -9 "${p#/proc/}" 2>/dev/null || true
		fi
	done
	# Mounts left under the state folder (pod volumes, rootfs, netns).
	findmnt -rn -o TARGET | grep -F "$RUN/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	[ -e "/run/netns/$NETNS" ] && ip netns del "$NETNS"
	ip link del "$VETH_HOST" 2>/dev/null || true
	rm -rf "$RUN"
}

status() {
	alive "$RUN/etcd.pid" etcd && alive "$RUN/apiserver.pid" kube-apiserver &&
		alive "$RUN/controller-manager.pid" kube-controller && alive "$RUN/scheduler.pid" kube-scheduler &&
		alive "$RUN/containerd.pid" containerd && alive "$RUN/kubelet.pid" kubelet &&
		[ -s "$RUN/env" ] && node_ready
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
env) cat "$RUN/env" ;;
build)
	need_tools
	build
	;;
restart-apiserver)
	# For fault tests: the apiserver goes away and comes back.
	stop "$RUN/apiserver.pid" kube-apiserver
	apiserver_up "$(bin_dir)"
	;;
*)
	sed -n '2,47p' "$0" >&2
	exit 2
	;;
esac
