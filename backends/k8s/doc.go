// Package k8s is sandboxkit's Kubernetes backend: each sandbox is a Pod in
// one namespace, made and driven through the API server with client-go (no
// kubectl).
//
// Create makes a pod with one container ("sandbox") from the Spec (image,
// command, env, working directory, ports, cpus / mem_limit / gpus as
// limits, hostPath and PersistentVolumeClaim volumes, security context
// without privilege escalation, the configured service account, runtime
// class, node selector, tolerations and pull secrets), waits for it to run
// and reports the pod's own reason when it does not (ImagePullBackOff,
// Unschedulable, OOMKilled, ... with its latest events); while it waits,
// the pod's events (scheduled, pulling and pulled the image, started) go to
// Spec.Progress as steps "start" and "pull". It then copies
// sbxd (see package sbxd and internal/sbxdbin) into an emptyDir at /.sbx,
// through an exec whose stdin carries the binary (the image needs /bin/sh,
// uname and cat, as busybox and every distribution image have).
//
// Exec runs through the pods/exec subresource (WebSocket, falling back to
// SPDY), every command under "sbxd exec", so a timeout kills the command's
// whole process tree inside the pod and a cancelled context does too (with
// "sbxd kill" in a second exec: the exec API cannot kill). The exec API
// sets neither environment nor working directory, so a small sh wrapper
// does. Attach gives sbxd.Wrap its stream; with it, exec and file calls go
// over one long-lived exec instead of one API round trip each.
//
// Commands with ExecRequest.User run under "sbxd exec --user", which
// resolves the user in the pod's /etc/passwd and switches to it: that
// needs a pod running as root; otherwise (and for a user the pod does not
// know) Exec returns an error, never a command run as someone else. An
// entry's user (Spec.User) is the pod's runAsUser/runAsGroup and must be
// numeric ("1000" or "1000:1000"; "root" is 0).
//
// Files move over exec streams, as kubectl cp does: the sandbox is a
// backend.FileSystem (cat in and out through small sh scripts, writes
// following symlinks and making parents, errors as *fs.PathError with
// fs.ErrNotExist, syscall.EISDIR, syscall.ENOTDIR, fs.ErrPermission) and a
// backend.Archiver (tar -x / tar -c over exec, for sbx cp and tree
// copies). Through sbxd (sbxd.Wrap) small files go over its one stream and
// large ones (sbxd.DefaultBulkThreshold) over their own exec.
//
// Endpoint forwards a local port to the pod through the API server
// (pods/portforward); a port with a host address in the entry
// ("8080/tcp" = 18080) is forwarded there from Create on, as long as the
// Backend lives. The listener is sandboxkit's, and each connection to it
// gets its own pair of streams: one made before the pod's server listens
// is closed and the forward stays, and a connection to the API server
// that dropped is dialed again at the next one (spaced out after failed
// dials). With service = true a ClusterIP Service per sandbox
// serves callers inside the cluster (Sandbox.ClusterAddress).
//
// Named volumes are PersistentVolumeClaims: CreateVolume makes a session's
// shared ones, and with a FromPath (a host folder or a .tar.gz) fills the
// claim through a short-lived pod of helper_image that mounts it (a tar
// stream over exec; the pod is removed whatever happens). A Spec naming a
// claim that does not exist makes it and ties it to the pod (owner
// reference), so it goes with the pod.
//
// Network: "" and "bridge" are the cluster's pod network, "host" is
// hostNetwork, and "none" is a deny-all NetworkPolicy for the pod. Only
// CNI plugins with NetworkPolicy support (Calico, Cilium, ...) enforce
// those, so Create then checks from inside the pod that it cannot reach
// its node (sbxd dial to the kubelet port) and, if it can, fails and
// removes the pod rather than hand out a sandbox with a network. Named
// networks are refused.
//
// Existing pods: Spec.Existing (OpenSage's pod_name) adopts a running pod
// of the namespace that sandboxkit did not make (its default container;
// sbxd is copied to /.sbx when the file system allows). Its ID is "ext-"
// and the pod's name, Get finds it by that, List does not show it, and
// Destroy leaves it running.
//
// Labels: the sandbox's labels (sandboxkit.id, .session, .name,
// .expires-at, .owner and the caller's) are kept whole in the annotation
// sandboxkit.io/labels; those that are valid Kubernetes labels are also pod
// labels, so List filters on the server and `kubectl get pods -l
// sandboxkit.session=...` works. Get, List, TTL renewal and `sbx gc` work
// from the cluster alone. A warm pool's claim (Backend.Claim) is one JSON
// patch, whose changes wait in the annotation sandboxkit.io/claim (applied
// over sandboxkit.io/labels) until the next write that reads the labels
// folds them in.
//
// Refused with an error that says why: pids_limit (Kubernetes limits
// processes per node, the kubelet's podPidsLimit, not per pod), dockerfile
// builds, security_opt other than no-new-privileges, seccomp=unconfined
// and apparmor=unconfined, UDP ports with a host port (port-forward is
// TCP). Not offered: checkpoints and pause (Kubernetes has neither).
//
// # Configuration
//
// The [sandbox.k8s] table; every key is optional:
//
//	[sandbox.k8s]
//	kubeconfig = "~/.kube/config"   # default: KUBECONFIG, ~/.kube/config, in-cluster
//	context = "prod"                # default: the kubeconfig's current context
//	namespace = "agents"            # default: the context's, else "default"
//	service_account = ""            # default: none mounted
//	run_as_user = 1000              # default: the image's user
//	runtime_class = "gvisor"
//	node_selector = { "pool" = "sandboxes" }
//	tolerations = [{ key = "sandboxes", operator = "Exists", effect = "NoSchedule" }]
//	image_pull_secrets = ["regcred"]
//	image_pull_policy = "IfNotPresent"
//	storage_class = "standard"
//	volume_size = "1Gi"
//	helper_image = "busybox:1.36"   # fills volumes from host folders
//	service = false                 # a ClusterIP Service per sandbox with ports
//
// # Test cluster
//
// scripts/k8s-harness.sh builds kube-apiserver, kube-controller-manager,
// kube-scheduler and kubelet (tools/k8s) and runs a one-node cluster on
// this machine; internal/k8stest starts it for the tests.
package k8s
