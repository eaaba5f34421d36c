package k8s

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
)

// Name is the backend's registry name.
const Name = "k8s"

// containerName is the name of the sandbox's container in its pod.
const containerName = "sandbox"

// Backend runs each sandbox as a Pod in one namespace. It is safe for
// concurrent use.
type Backend struct {
	cfg  Config
	log  *slog.Logger
	rest *rest.Config
	kube kubeAPI
	ns   string
	host string // the API server, for messages

	payloadMu sync.Mutex
	payloads  map[string][]byte

	nodes nodeAddrCache // the nodes' addresses, for egress enforcers

	mu       sync.Mutex
	forwards map[forwardKey]*forward
	closed   bool

	// agentFailed: when a pod's direct agent last did not answer
	// (UnixNano; 0: never; see DialAgent).
	agentFailed atomic.Int64

	// holdSizes (tests only): terminal sizes wait until it is closed.
	holdSizes <-chan struct{}
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.VolumeManager = (*Backend)(nil)
)

// Option configures New.
type Option func(*options)

type options struct{ logger *slog.Logger }

// WithLogger sets the backend's logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// New opens the cluster cfg names (settings it leaves empty come from
// OpenSage's OPENSAGE_K8S_* variables, then the standard places; see
// Config). It checks the configuration but does not
// contact the cluster: an unreachable API server shows at the first call,
// as an error wrapping backend.ErrUnavailable.
func New(cfg Config, opts ...Option) (*Backend, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	logger := o.logger
	cfg = cfg.withEnv()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, w := range imageCacheWarnings() {
		if logger != nil {
			logger.Warn(w)
		}
	}
	rc, ns, err := cfg.restConfig()
	if err != nil {
		return nil, err
	}
	// Exec and port-forward streams are long-lived; plain requests get
	// their bound from the context (see Config.RequestTimeoutSec).
	rc = rest.CopyConfig(rc)
	rc.Timeout = 0
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	kube, err := newKube(rc)
	if err != nil {
		return nil, invalid("kubeconfig", "%v", err)
	}
	return newBackend(cfg, logger, rc, kube, ns), nil
}

// newBackend wires a Backend around an API client (a fake clientset in unit
// tests, where rc may be nil: exec and port-forward then fail).
func newBackend(cfg Config, logger *slog.Logger, rc *rest.Config, kube kubeAPI, ns string) *Backend {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	host := "the cluster"
	if rc != nil {
		host = rc.Host
	}
	return &Backend{cfg: cfg, log: logger, rest: rc, kube: kube, ns: ns, host: host, forwards: map[forwardKey]*forward{}}
}

func (b *Backend) Name() string { return Name }

// Namespace is the namespace the backend's pods live in.
func (b *Backend) Namespace() string { return b.ns }

// Capabilities: containers on the cluster's nodes (a VM per pod with a
// gVisor or Kata runtime class, which the cluster decides). Users are
// switched by sbxd inside the pod (which must run as root for it); pids
// limits are a node setting, so not offered; network "none" needs a CNI
// plugin that enforces NetworkPolicies (Create checks).
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Isolation:      backend.RuntimeIsolation(b.cfg.RuntimeClass),
		Egress:         true,
		Credentials:    true,
		NetworkModes:   []string{"bridge", "host", "none"},
		Images:         true,
		BindVolumes:    true,
		NamedVolumes:   true,
		Ports:          true,
		User:           true,
		CPULimit:       true,
		MemoryLimit:    true,
		GPUs:           true,
		ShmSize:        true,
		Privileged:     true,
		CapAdd:         true,
		CapDrop:        true,
		SecurityOpt:    true,
		ReadOnlyRootfs: true,
		Runtimes:       offeredRuntimes(b.classes()),
		RuntimeHint:    runtimeHint,
		ImageCommand:   true,
		Hostname:       true,
		ExtraHosts:     true,
		AttachExisting: true,
		Persistent:     true,
	}
}

// Close stops the port forwards Endpoint started. Pods keep running.
func (b *Backend) Close() error {
	b.mu.Lock()
	fws := slices.Collect(maps.Values(b.forwards))
	b.forwards = map[forwardKey]*forward{}
	b.closed = true
	b.mu.Unlock()
	for _, f := range fws {
		f.close()
	}
	return nil
}

// reqCtx bounds one plain API request.
func (b *Backend) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.cfg.requestTimeout())
}

// Create makes a pod for spec and waits for it to run.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	if err := refuseUnsupported(spec); err != nil {
		return nil, b.opErr("create", "", err)
	}
	if err := checkEgress(spec); err != nil {
		return nil, b.opErr("create", "", err)
	}
	if err := b.Capabilities().Check(Name, spec); err != nil {
		return nil, b.opErr("create", "", err)
	}
	if spec.Existing != "" {
		return b.attachExisting(ctx, spec)
	}
	if spec.Image == "" {
		return nil, b.opErr("create", "", fmt.Errorf("%w: no image (set image in the sandbox entry or [sandbox] default_image)", backend.ErrInvalidConfig))
	}
	id := newPodName(spec.Name)
	var brokered *backendkit.Brokered
	if len(spec.Credentials) > 0 {
		var err error
		if brokered, err = backendkit.PrepareCredentials(ctx, id, spec.Credentials); err != nil {
			return nil, b.opErr("create", "", err)
		}
		spec.Env = maps.Clone(spec.Env)
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		maps.Copy(spec.Env, podCredentialEnv(brokered))
	}
	pod, err := b.podFor(id, spec)
	if err != nil {
		return nil, b.opErr("create", "", err)
	}
	claims, err := b.claimsFor(ctx, spec)
	if err != nil {
		return nil, b.opErr("create", "", err)
	}
	rctx, cancel := b.reqCtx(ctx)
	created, err := b.kube.Pods(b.ns).Create(rctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		return nil, b.opErr("create", id, err)
	}
	// Whatever fails from here on removes the pod.
	fail := func(err error) (backend.Sandbox, error) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.requestTimeout())
		defer cancel()
		if derr := b.deletePod(dctx, id, 0); derr != nil {
			b.log.Warn("removing a pod that failed to start failed", "pod", id, "err", derr)
		}
		return nil, b.opErr("create", id, err)
	}
	if err := b.ownClaims(ctx, created, claims); err != nil {
		return fail(err)
	}
	if spec.Network == "none" {
		if err := b.createDenyAll(ctx, created); err != nil {
			return fail(err)
		}
	}
	if b.cfg.Service && len(spec.Ports) > 0 {
		if err := b.createService(ctx, created); err != nil {
			return fail(err)
		}
	}
	running, err := b.waitRunning(ctx, created, spec.Name, spec.Progress)
	if err != nil {
		return fail(err)
	}
	sb := b.sandboxFor(running)
	if err := sb.withAgent(spec, running.Status.PodIP); err != nil {
		return fail(err)
	}
	if err := sb.setUp(ctx, spec.WorkingDir == ""); err != nil {
		return fail(err)
	}
	if brokered != nil {
		if err := sb.deliverCredentials(ctx, brokered); err != nil {
			return fail(err)
		}
	}
	if spec.Egress != nil {
		if err := sb.waitEnforcer(ctx); err != nil {
			return fail(err)
		}
	}
	if spec.Network == "none" {
		if err := sb.checkCutOff(ctx, running); err != nil {
			return fail(err)
		}
	}
	// Ports with a host address listen there from now on, as Docker's
	// published ports do (the forwards live as long as this Backend).
	for _, port := range slices.Sorted(maps.Keys(sb.hostAddrs)) {
		if _, err := sb.Endpoint(ctx, port); err != nil {
			b.stopForwards(id)
			return fail(fmt.Errorf("port %d: forwarding %s to it: %w", port, sb.hostAddrs[port], err))
		}
	}
	return sb, nil
}

// newPodName is a fresh pod name: "sbx-", the entry name made DNS-safe and
// short, and 10 random hex digits.
func newPodName(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	safe := strings.Trim(b.String(), "-")
	if len(safe) > 30 {
		safe = strings.TrimRight(safe[:30], "-")
	}
	if safe != "" {
		safe += "-"
	}
	return "sbx-" + safe + randomHex(5)
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Get reattaches to a sandbox by ID (its pod's name).
func (b *Backend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	if ref, ok := strings.CutPrefix(id, adoptedPrefix); ok && ref != "" {
		s, err := b.adopt(ctx, strings.Replace(ref, "_", "/", 1), "sandbox "+id)
		if err != nil {
			return nil, b.opErr("get", id, err)
		}
		return s, nil
	}
	pod, err := b.getPod(ctx, id)
	if err != nil {
		return nil, b.opErr("get", id, err)
	}
	return b.sandboxFor(pod), nil
}

// getPod fetches a sandbox's pod; pods that are not sandboxkit's, and pods
// being deleted, are not found.
func (b *Backend) getPod(ctx context.Context, id string) (*corev1.Pod, error) {
	if len(validation.IsDNS1123Subdomain(id)) > 0 {
		return nil, fmt.Errorf("%w: %q is not a pod name, so no sandbox of the k8s backend", backend.ErrNotFound, id)
	}
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	pod, err := b.kube.Pods(b.ns).Get(rctx, id, metav1.GetOptions{})
	if err != nil {
		return nil, b.translate(err)
	}
	if pod.Labels[backend.LabelBackend] != Name {
		return nil, fmt.Errorf("%w: pod %s/%s was not made by sandboxkit", backend.ErrNotFound, b.ns, id)
	}
	if pod.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%w: pod %s/%s is being deleted", backend.ErrNotFound, b.ns, id)
	}
	return pod, nil
}

// List returns the sandboxes matching filter, sorted by ID. Pods being
// deleted are left out.
func (b *Backend) List(ctx context.Context, filter backend.Filter) ([]backend.Info, error) {
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	pods, err := b.kube.Pods(b.ns).List(rctx, metav1.ListOptions{LabelSelector: selector(filter)})
	if err != nil {
		return nil, b.opErr("list", "", err)
	}
	infos := []backend.Info{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		info := infoOf(pod)
		if filter.Match(info) {
			infos = append(infos, info)
		}
	}
	slices.SortFunc(infos, func(a, b backend.Info) int { return strings.Compare(a.ID, b.ID) })
	return infos, nil
}

// infoOf describes a sandbox from its pod.
func infoOf(pod *corev1.Pod) backend.Info {
	all := labelsOf(pod.ObjectMeta)
	info := backend.Info{
		ID:        pod.Name,
		Backend:   Name,
		Name:      all[backend.LabelName],
		Session:   all[backend.LabelSession],
		Owner:     all[backend.LabelOwner],
		Labels:    all,
		CreatedAt: pod.CreationTimestamp.Time,
		ExpiresAt: expiresAt(all),
		State:     stateOf(pod),
		WorkDir:   pod.Annotations[annotationWorkDir],
		Isolation: backend.IsolationContainer,
	}
	if rc := pod.Spec.RuntimeClassName; rc != nil {
		info.Isolation = backend.RuntimeIsolation(*rc)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == containerName {
			info.Image = c.Image
			if info.WorkDir == "" {
				info.WorkDir = c.WorkingDir
			}
		}
	}
	if info.WorkDir == "" {
		info.WorkDir = "/"
	}
	return info
}

func stateOf(pod *corev1.Pod) backend.State {
	if pod.DeletionTimestamp != nil {
		return backend.StateExited
	}
	switch pod.Status.Phase {
	case corev1.PodPending:
		return backend.StateCreating
	case corev1.PodRunning:
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == containerName && cs.State.Running == nil {
				return backend.StateExited
			}
		}
		return backend.StateRunning
	case corev1.PodSucceeded, corev1.PodFailed:
		return backend.StateExited
	}
	return backend.StateUnknown
}

// deletePod deletes a pod with a grace period in seconds; a pod that is
// gone is not an error.
func (b *Backend) deletePod(ctx context.Context, name string, grace int64) error {
	policy := metav1.DeletePropagationBackground
	err := b.kube.Pods(b.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &policy})
	err = b.translate(err)
	if errors.Is(err, backend.ErrNotFound) {
		return nil
	}
	return err
}

// subresourceURL is the URL of a pod's exec or portforward subresource.
func (b *Backend) subresourceURL(pod, sub string, params *corev1.PodExecOptions) (*url.URL, error) {
	if b.rest == nil {
		return nil, fmt.Errorf("%w: no REST config (a fake clientset)", errors.ErrUnsupported)
	}
	req := b.kube.CoreREST().Post().Namespace(b.ns).Resource("pods").Name(pod).SubResource(sub)
	if params != nil {
		req = req.VersionedParams(params, parameterCodec())
	}
	return req.URL(), nil
}

// now is the clock, for TTL labels.
var now = time.Now
