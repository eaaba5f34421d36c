package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The direct path to a pod's agent. sbxd's client starts the agent
// through the exec stream (client -> API server -> kubelet -> container
// runtime), and then, when the sandbox can dial its pod (sbxd.DirectDialer,
// implemented here), talks to it over TLS on a port of the pod instead: a
// burst of commands then costs the API server and the kubelet nothing. The
// agent's certificate fingerprint and the client's token travel over the
// exec stream only; see sbxd.DirectDialer for the protocol. The exec
// stream stays open (the agent lives as long as it does); where the pod
// network is not reachable from this process (outside the cluster, a
// NetworkPolicy), the probe fails and the exec stream carries everything,
// as with direct_agent = false.

// directProbeTimeout bounds the probe, paid once per agent where pod IPs
// are not reachable (by a pool when it makes a member, so a claim does
// not pay it). A reachable pod answers in a fraction of it.
const directProbeTimeout = 500 * time.Millisecond

// directTarget is the pod IP a direct path dials, or why there is none.
func directTarget(pod *corev1.Pod) (ip, why string) {
	switch {
	case pod.Spec.HostNetwork:
		// Its ports would be the node's, on every address of it.
		return "", `the pod uses its node's network (network = "host")`
	case pod.Annotations[annotationNetwork] == "none":
		return "", `the pod has no network (network = "none")`
	case pod.Status.PodIP == "":
		return "", "the pod has no IP address"
	}
	return pod.Status.PodIP, ""
}

// DialDirect connects to port of the pod at its IP (sbxd.DirectDialer),
// failing within directProbeTimeout when the pod network is not reachable
// from here, and with an error wrapping errors.ErrUnsupported when the
// direct path is off (direct_agent = false) or the pod has no network of
// its own.
func (s *Sandbox) DialDirect(ctx context.Context, port int) (net.Conn, error) {
	switch {
	case !s.b.cfg.directAgent():
		return nil, fmt.Errorf("%w: direct_agent = false in [sandbox.k8s]", errors.ErrUnsupported)
	case s.noDirect != "":
		return nil, fmt.Errorf("%w: no direct path to pod %s/%s: %s", errors.ErrUnsupported, s.b.ns, s.pod, s.noDirect)
	case s.destroyed.Load():
		return nil, s.gone()
	}
	ctx, cancel := context.WithTimeout(ctx, directProbeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(s.podIP, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s is not reachable at its IP from here (%w); calls take the exec stream (direct_agent = false in [sandbox.k8s] skips this probe)",
			s.b.ns, s.pod, err)
	}
	return conn, nil
}
