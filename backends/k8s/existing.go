package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Spec.Existing (OpenSage's pod_name) adopts a running pod of the
// backend's namespace that sandboxkit did not make: "POD", or
// "POD/CONTAINER" (OpenSage's container_name). Commands run in that
// container, else the pod's default one (the
// kubectl.kubernetes.io/default-container annotation, else the first). The pod is left as it is, with one
// exception, as the native backend does with containers: sbxd is copied to
// /.sbx/sbxd when the container has none and its file system lets it, so
// timeouts and cancels kill commands inside it and users can be switched.
// Nothing is labelled or annotated; Get finds it again by its ID
// ("ext-" and the pod's name); List does not show it; Destroy only
// detaches; Renew is refused.

// adoptedPrefix starts the ID of an adopted sandbox; the rest is the pod's
// name, and "_" and the container's when one was named ("_" is in neither
// kind of name).
const adoptedPrefix = "ext-"

// defaultContainerAnnotation names the container kubectl exec picks.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// attachExisting adopts the pod spec.Existing names.
func (b *Backend) attachExisting(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	s, err := b.adopt(ctx, spec.Existing, "pod_name "+spec.Existing)
	if err != nil {
		return nil, b.opErr("attach", "", err)
	}
	s.name = spec.Name
	if spec.Image != "" || spec.Command != nil || len(spec.Volumes) > 0 || len(spec.Ports) > 0 || len(spec.Env) > 0 {
		b.log.Debug("attaching to an existing pod: the entry's image, command, environment, volumes and ports are not used",
			"pod", spec.Existing)
	}
	return s, nil
}

// adopt reads the pod, checks that its container runs, and makes sure the
// container has sbxd (else the sandbox runs plain execs).
func (b *Backend) adopt(ctx context.Context, ref, what string) (*Sandbox, error) {
	name, container, named := strings.Cut(ref, "/")
	if len(validation.IsDNS1123Subdomain(name)) > 0 || (named && len(validation.IsDNS1123Label(container)) > 0) {
		return nil, fmt.Errorf("%w: %s: want a pod name, or POD/CONTAINER", backend.ErrInvalidConfig, what)
	}
	pod, err := b.getAnyPod(ctx, name)
	if errors.Is(err, backend.ErrNotFound) {
		return nil, fmt.Errorf("%s: %w (kubectl get pods -n %s lists the namespace's pods)", what, err, b.ns)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	id := adoptedPrefix + name
	if named {
		if !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == container }) {
			var names []string
			for _, c := range pod.Spec.Containers {
				names = append(names, c.Name)
			}
			return nil, fmt.Errorf("%w: %s: pod %s/%s has no container %q (it has %s)",
				backend.ErrNotFound, what, b.ns, name, container, strings.Join(names, ", "))
		}
		id += "_" + container
	} else {
		container = defaultContainer(pod)
	}
	if pod.Status.Phase != corev1.PodRunning || !containerRunning(pod, container) {
		return nil, fmt.Errorf("%w: %s: pod %s/%s is %s, not running (kubectl get pod %s -n %s says why)",
			backend.ErrInvalidConfig, what, b.ns, name, podState(pod, container), name, b.ns)
	}
	s := &Sandbox{b: b, id: id, pod: name, container: container, adopted: true,
		ports: tcpPorts(pod, container), workDir: "/"}
	for _, c := range pod.Spec.Containers {
		if c.Name == container && c.WorkingDir != "" {
			s.workDir = c.WorkingDir
		}
	}
	var out strings.Builder
	if code, err := s.stream(ctx, []string{sbxdPath, "version"}, nil, &out, io.Discard); err == nil && code == 0 && strings.HasPrefix(out.String(), "sbxd ") {
		s.sbxd = true
		s.framed = sbxdFramed(strings.TrimSpace(strings.TrimPrefix(out.String(), "sbxd ")))
	} else if _, _, err := s.inject(ctx); err == nil {
		s.sbxd, s.framed = true, true
	} else {
		b.log.Warn("no sbxd in the existing pod: commands run as plain execs, and a timeout or cancel cannot kill them inside it",
			"pod", name, "container", container, "err", err)
	}
	if wd, err := s.pwd(ctx); err == nil {
		s.workDir = wd
	}
	return s, nil
}

// getAnyPod reads a pod whoever made it; one being deleted is not found.
func (b *Backend) getAnyPod(ctx context.Context, name string) (*corev1.Pod, error) {
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	pod, err := b.kube.Pods(b.ns).Get(rctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, b.translate(err)
	}
	if pod.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%w: pod %s/%s is being deleted", backend.ErrNotFound, b.ns, name)
	}
	return pod, nil
}

func defaultContainer(pod *corev1.Pod) string {
	if c := pod.Annotations[defaultContainerAnnotation]; c != "" {
		return c
	}
	if len(pod.Spec.Containers) > 0 {
		return pod.Spec.Containers[0].Name
	}
	return ""
}

func containerRunning(pod *corev1.Pod, container string) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Running != nil
		}
	}
	return false
}

// podState says what a pod that is not running is doing.
func podState(pod *corev1.Pod, container string) string {
	state := string(pod.Status.Phase)
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != container {
			continue
		}
		switch {
		case cs.State.Waiting != nil:
			state += " (container " + container + " waiting: " + cs.State.Waiting.Reason + ")"
		case cs.State.Terminated != nil:
			state += fmt.Sprintf(" (container %s exited with code %d)", container, cs.State.Terminated.ExitCode)
		}
	}
	return state
}

// adoptedInfo describes an adopted pod: its labels are someone else's.
func (s *Sandbox) adoptedInfo(pod *corev1.Pod) backend.Info {
	info := backend.Info{
		ID:        s.id,
		Backend:   Name,
		Name:      s.name,
		Labels:    map[string]string{},
		CreatedAt: pod.CreationTimestamp.Time,
		ExpiresAt: time.Time{},
		State:     backend.StateExited,
		WorkDir:   s.workDir,
	}
	if pod.Status.Phase == corev1.PodRunning && containerRunning(pod, s.container) {
		info.State = backend.StateRunning
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == s.container {
			info.Image = c.Image
		}
	}
	return info
}
