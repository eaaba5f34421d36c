package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Network modes. A pod has one network namespace, made by the cluster's
// CNI plugin; what a Spec can ask of it:
//
//   - "" and "bridge": the cluster's pod network (an address of its own,
//     reaching other pods and, as the cluster allows, the outside), the
//     nearest thing to Docker's bridge.
//   - "host": hostNetwork, the node's network namespace.
//   - "none": a NetworkPolicy that selects only this pod and allows no
//     traffic in or out (owned by the pod, so it goes with it). Kubernetes
//     itself does not enforce NetworkPolicies: the CNI plugin does, and
//     many (the plain bridge plugin, flannel, kindnet before 0.24) ignore
//     them. So Create then checks from inside the pod that it cannot
//     reach its node (sbxd dial to the kubelet's port) and fails, removing
//     the pod, when it can: a sandbox asked to have no network never runs
//     with one.
//
// Named networks (a session's network) are not offered: pods of a
// namespace reach each other already; a Service per sandbox (service =
// true) gives them names.

const (
	// kubeletPort is where the none check dials the pod's node: every
	// node's kubelet listens there.
	kubeletPort = "10250"
	// noneCheckTimeout bounds how long Create waits for the CNI plugin to
	// apply the deny-all policy.
	noneCheckTimeout = 20 * time.Second
)

// applyNetwork sets the pod's network from spec.Network.
func applyNetwork(ps *corev1.PodSpec, network string) error {
	switch network {
	case "", "bridge", "none":
	case "host":
		ps.HostNetwork = true
		ps.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	default:
		return fmt.Errorf("%w: network %q: the k8s backend offers \"\" or \"bridge\" (the pod network), \"host\" (hostNetwork) and \"none\" (a deny-all NetworkPolicy); named networks are not offered (pods of a namespace reach each other; service = true names them)",
			errors.ErrUnsupported, network)
	}
	return nil
}

// createDenyAll makes the NetworkPolicy that cuts pod off, owned by it.
func (b *Backend) createDenyAll(ctx context.Context, pod *corev1.Pod) error {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: b.ownedBy(pod),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{backend.LabelID: pod.Name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	_, err := b.kube.NetworkPolicies(b.ns).Create(rctx, np, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("network \"none\": network policy %s: %w", pod.Name, b.translate(err))
	}
	return nil
}

// checkCutOff makes sure a pod with network "none" cannot reach its node,
// waiting a little for the CNI plugin to apply the policy.
func (s *Sandbox) checkCutOff(ctx context.Context, pod *corev1.Pod) error {
	if !s.sbxd {
		return fmt.Errorf("%w: network \"none\": cannot check that the deny-all NetworkPolicy is enforced without sbxd in the pod (its image has no /bin/sh)",
			errors.ErrUnsupported)
	}
	if pod.Status.HostIP == "" {
		return errors.New(`network "none": the pod has no node address to check the NetworkPolicy against`)
	}
	addr := net.JoinHostPort(pod.Status.HostIP, kubeletPort)
	deadline := time.Now().Add(noneCheckTimeout)
	for {
		var stderr strings.Builder
		code, err := s.stream(ctx, []string{sbxdPath, "dial", addr, "2s"}, nil, &stderr, &stderr)
		if err != nil {
			return err
		}
		if code != 0 {
			return nil // cut off
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: network \"none\": the pod still reaches its node (%s) %v after its deny-all NetworkPolicy was made: this cluster's CNI plugin does not enforce NetworkPolicies (use one that does, such as Calico or Cilium, or drop network = \"none\")",
				errors.ErrUnsupported, addr, noneCheckTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
