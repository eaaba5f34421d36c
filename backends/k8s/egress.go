package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
	"github.com/sandboxkit/sandboxkit/internal/egresshost"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
)

// Egress policies (Spec.Egress) on Kubernetes.
//
// Containers of a pod share its network namespace, so a sandbox's enforcer
// is a sidecar of its pod (an init container with restartPolicy Always,
// egressContainer): `sbxd egress --in-netns` from the pod's sbxd volume,
// as root with CAP_NET_ADMIN alone. It loads the namespace's nftables
// rules (package egressctl: DNS to its resolver and TCP to its proxy on
// loopback, nothing else out but its own marked sockets), then creates
// egressReady in the sbxd volume. The sandbox's container drops NET_RAW
// and NET_ADMIN and runs nothing of the entry's before egressReady exists
// (its command waits for it), and Create returns only once it does. The
// rules live in the pod's namespace, so no network plugin support
// (NetworkPolicy) is needed. The sandbox cannot see or signal the sidecar
// (its own PID namespace) or reach its controls (a unix socket in the
// sidecar's state volume, which only the sidecar mounts): SetEgress and
// EgressStatus exec `sbxd egress-ctl` in the sidecar. The state volume
// keeps policy changes across restarts of the sidecar.
const (
	egressContainer = "egress"
	egressState     = "/.sbx-egress"
	egressReady     = sbxdDir + "/egress.ready"
	// egressPolicyEnv carries the initial policy to the sidecar.
	egressPolicyEnv = "SBX_EGRESS_POLICY"
)

// checkEgress refuses specs whose policy a pod cannot be held to.
func checkEgress(spec backend.Spec) error {
	if spec.Egress == nil {
		return nil
	}
	if _, err := egress.NewPolicy(spec.Egress.Default, spec.Egress.Allow, spec.Egress.Deny); err != nil {
		return fmt.Errorf("%w: egress: %v", backend.ErrInvalidConfig, err)
	}
	switch {
	case spec.Network == "host", spec.Network == "none":
		return fmt.Errorf("%w: egress and network = %q exclude each other: the policy's enforcer needs the pod on a network of its own (remove one)", backend.ErrInvalidConfig, spec.Network)
	case spec.Privileged:
		return fmt.Errorf("%w: egress and privileged exclude each other: a privileged sandbox has CAP_NET_ADMIN", backend.ErrInvalidConfig)
	case spec.ImageCommand:
		return fmt.Errorf("%w: egress with the image's own command (command = \"\"): the pod would start it before the enforcer is ready; give the command in the entry", errors.ErrUnsupported)
	case spec.Existing != "":
		return fmt.Errorf("%w: egress: an existing pod (existing = ...) was made without an enforcer; create the sandbox instead", backend.ErrInvalidConfig)
	}
	for _, c := range spec.CapAdd {
		switch capName(c) {
		case "NET_ADMIN", "NET_RAW", "ALL":
			return fmt.Errorf("%w: egress: cap_add %s would let the sandbox mark its packets past the enforcer or manage its network; remove it", backend.ErrInvalidConfig, c)
		}
	}
	return nil
}

// egressWait is the shell that holds the sandbox's command until its
// enforcer is ready.
const egressWait = `while [ ! -e ` + egressReady + ` ]; do sleep 0.05; done; `

// addEnforcer adds the enforcer sidecar to pod spec ps of spec, whose
// sandbox container is c (made to wait for it and to drop what could get
// past it).
func (b *Backend) addEnforcer(ps *corev1.PodSpec, c *corev1.Container, spec backend.Spec) error {
	policy, err := json.Marshal(spec.Egress)
	if err != nil {
		return err
	}
	args := []string{sbxdPath, "egress", "--in-netns", "--state", egressState,
		"--proxy-port", strconv.Itoa(egressctl.ProxyPort), "--dns-port", strconv.Itoa(egressctl.DNSPort),
		"--policy-json", "\"$" + egressPolicyEnv + "\"", "--ready-file", egressReady}
	if b.cfg.EgressDNS != "" {
		ap, _ := egressctl.DNSServer(b.cfg.EgressDNS) // checked by New
		args = append(args, "--upstream", ap)
	}
	if host := egressctl.HostAddrsFlag(b.nodeAddrs()); host != "" {
		args = append(args, "--host-addrs", host)
	}
	// With credentials, the enforcer waits for its file too (Create puts
	// it there: see credentials.go).
	wait := "[ ! -x " + sbxdPath + " ]"
	env := []corev1.EnvVar{{Name: egressPolicyEnv, Value: string(policy)}}
	if len(spec.Credentials) > 0 {
		args = append(args, "--credentials", egressCredentials)
		wait += " || [ ! -e " + egressCredentials + " ]"
		if backendkit.HostRoots() != nil {
			env = append(env, corev1.EnvVar{Name: "SSL_CERT_FILE", Value: egressRoots})
		}
	}
	root, no := int64(0), false
	always := corev1.ContainerRestartPolicyAlways
	sidecar := corev1.Container{
		Name:            egressContainer,
		Image:           spec.Image,
		ImagePullPolicy: c.ImagePullPolicy,
		// sbxd comes in once the pod runs (Create puts it there).
		Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT\nwhile " + wait + "; do sleep 0.05; done\nexec " + strings.Join(args, " ")},
		Env:     env,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "sbx", MountPath: sbxdDir},
			{Name: "egress-state", MountPath: egressState},
		},
		RestartPolicy: &always,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                &root,
			RunAsGroup:               &root,
			AllowPrivilegeEscalation: &no,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
		},
	}
	ps.InitContainers = append(ps.InitContainers, sidecar)
	ps.Volumes = append(ps.Volumes, corev1.Volume{Name: "egress-state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})

	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	if c.SecurityContext.Capabilities == nil {
		c.SecurityContext.Capabilities = &corev1.Capabilities{}
	}
	c.SecurityContext.Capabilities.Drop = append(c.SecurityContext.Capabilities.Drop, "NET_RAW", "NET_ADMIN")
	// The sandbox's own command waits for the enforcer (keepAlive, the
	// default, waits for sbxd, which comes before; it waits for both).
	const trap = "trap 'exit 0' TERM INT\n"
	switch {
	case spec.Command != nil:
		c.Command = append([]string{"/bin/sh", "-c", trap + egressWait + `exec "$@"`, "sh"}, spec.Command...)
	default:
		c.Command = []string{"/bin/sh", "-c", trap + egressWait + keepAlive}
	}
	return nil
}

// waitEnforcer waits until the sandbox's enforcer is ready, with a
// command in the sandbox's container (which runs nothing else yet).
func (s *Sandbox) waitEnforcer(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// One buffer for both streams, which the client copies from two
	// goroutines.
	var out syncbuf.Buffer
	code, err := s.stream(ctx, []string{"/bin/sh", "-c", egressWait}, nil, &out, &out)
	if err == nil && code != 0 {
		err = fmt.Errorf("exited %d: %s", code, strings.TrimSpace(out.String()))
	}
	if err != nil {
		var logs string
		if tail, lerr := s.b.containerLog(context.WithoutCancel(ctx), s.pod, egressContainer); lerr == nil {
			logs = ": " + tail
		}
		return fmt.Errorf("egress enforcer: not ready (%w)%s", err, logs)
	}
	return nil
}

// containerLog is the tail of a container's log.
func (b *Backend) containerLog(ctx context.Context, pod, container string) (string, error) {
	ctx, cancel := b.reqCtx(ctx)
	defer cancel()
	tail := int64(20)
	rc, err := b.kube.Pods(b.ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &tail}).Stream(ctx)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 8<<10))
	return strings.TrimSpace(string(data)), err
}

var _ backend.EgressController = (*Backend)(nil)

// SetEgress replaces sandbox id's policy (backend.EgressController).
func (b *Backend) SetEgress(ctx context.Context, id string, policy backend.Egress) error {
	if err := b.checkEnforcer(ctx, "set egress", id); err != nil {
		return err
	}
	return b.opErr("set egress", id, egressctl.SetPolicyVia(ctx, b.runInSidecar(id), sbxdPath, egressState, egressctl.Policy(policy)))
}

// EgressStatus returns sandbox id's policy and latest denials
// (backend.EgressController).
func (b *Backend) EgressStatus(ctx context.Context, id string) (backend.EgressStatus, error) {
	if err := b.checkEnforcer(ctx, "egress status", id); err != nil {
		return backend.EgressStatus{}, err
	}
	st, err := egressctl.StatusVia(ctx, b.runInSidecar(id), sbxdPath, egressState)
	return egresshost.Status(st), b.opErr("egress status", id, err)
}

// runInSidecar runs commands in pod's enforcer sidecar.
func (b *Backend) runInSidecar(pod string) egressctl.RunFunc {
	return func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, int, error) {
		var stdout, stderr bytes.Buffer
		var in io.Reader
		if stdin != nil {
			in = bytes.NewReader(stdin)
		}
		code, err := b.stream(ctx, pod, egressContainer, argv, in, &stdout, &stderr)
		return stdout.Bytes(), stderr.Bytes(), code, err
	}
}

// checkEnforcer makes sure sandbox id's pod has an enforcer.
func (b *Backend) checkEnforcer(ctx context.Context, op, id string) error {
	pod, err := b.getPod(ctx, id)
	if err != nil {
		return b.opErr(op, id, err)
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == egressContainer {
			return nil
		}
	}
	return b.opErr(op, id, fmt.Errorf("%w: sandbox %s was made without an egress policy, so its pod has no enforcer (create it with one: egress = {...} in its entry)", errors.ErrUnsupported, id))
}
