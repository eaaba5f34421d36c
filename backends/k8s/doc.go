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
// Unschedulable, OOMKilled, ... with its latest events). It then copies
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
// Files move through the package backend fallbacks (sh and cat over Exec)
// or, faster, through sbxd. Endpoint forwards a local port to the pod
// through the API server (pods/portforward); with service = true a
// ClusterIP Service per sandbox serves callers inside the cluster
// (Sandbox.ClusterAddress). Named volumes are
// PersistentVolumeClaims: CreateVolume makes a session's shared ones; a
// Spec naming a claim that does not exist makes it and ties it to the pod
// (owner reference), so it goes with the pod.
//
// Labels: the sandbox's labels (sandboxkit.id, .session, .name,
// .expires-at, .owner and the caller's) are kept whole in the annotation
// sandboxkit.io/labels; those that are valid Kubernetes labels are also pod
// labels, so List filters on the server and `kubectl get pods -l
// sandboxkit.session=...` works. Get, List, TTL renewal and `sbx gc` work
// from the cluster alone.
//
// Not offered: switching users per exec, pids limits, network modes,
// checkpoints, pause (Kubernetes has none of them), filling a volume from a
// host path.
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
//	service = false                 # a ClusterIP Service per sandbox with ports
//
// # Test cluster
//
// scripts/k8s-harness.sh builds kube-apiserver, kube-controller-manager,
// kube-scheduler and kubelet (tools/k8s) and runs a one-node cluster on
// this machine; internal/k8stest starts it for the tests.
package k8s
