package k8s

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sandboxkit/sandboxkit/backend"
)

// fatalWaiting are reasons a container waits for that do not go away by
// waiting (the kubelet only backs off and retries).
var fatalWaiting = []string{
	"ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff",
}

// errStartFailed wraps the reasons a pod did not reach Running.
var errStartFailed = errors.New("pod did not start")

// waitRunning waits, within the start timeout, for pod's sandbox container
// to run. A failure reports the pod's own reason (ImagePullBackOff,
// Unschedulable, OOMKilled, ...) and its recent events. With progress set,
// the pod's events (scheduling, image pulls, container start) are passed
// on as they come, from this goroutine.
func (b *Backend) waitRunning(ctx context.Context, pod *corev1.Pod, name string, progress func(backend.Progress)) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.startTimeout())
	defer cancel()
	events := b.watchPodEvents(ctx, pod.Name, name, progress)
	defer events.finish(ctx)
	last := pod
	for {
		w, err := b.kube.Pods(b.ns).Watch(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, b.startTimeoutErr(ctx, last)
			}
			return nil, b.translate(err)
		}
		// The pod may have changed before the watch began.
		if p, err := b.kube.Pods(b.ns).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
			last = p
		} else if err := b.translate(err); errors.Is(err, backend.ErrNotFound) {
			w.Stop()
			return nil, fmt.Errorf("%w: pod %s was deleted while starting", backend.ErrNotFound, pod.Name)
		}
		done, err := b.checkStarted(ctx, last)
		if done || err != nil {
			w.Stop()
			return last, err
		}
	events:
		for {
			var ev watch.Event
			var ok bool
			select {
			case ev, ok = <-w.ResultChan():
			case e, open := <-events.ch:
				events.received(e, open)
				continue
			case <-ctx.Done():
			}
			if !ok {
				break // the watch ended, or ctx: watch again or give up
			}
			if ev.Type == watch.Deleted {
				w.Stop()
				return nil, fmt.Errorf("%w: pod %s was deleted while starting", backend.ErrNotFound, pod.Name)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				break events // an error event: watch again
			}
			last = p
			if done, err := b.checkStarted(ctx, last); done || err != nil {
				w.Stop()
				return last, err
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil, b.startTimeoutErr(ctx, last)
		}
	}
}

// podEvents passes a starting pod's events on to a Create's progress
// function, each once.
type podEvents struct {
	b        *Backend
	pod      string // the pod's name
	name     string // the sandbox's, for progress
	progress func(backend.Progress)
	seen     map[string]bool // events reported, by UID and count
	ch       <-chan watch.Event
	stop     func()
}

// watchPodEvents watches pod's events when progress is set. Progress is a
// courtesy: a watch that fails is no error (finish still reports).
func (b *Backend) watchPodEvents(ctx context.Context, pod, name string, progress func(backend.Progress)) *podEvents {
	e := &podEvents{b: b, pod: pod, name: name, progress: progress, seen: map[string]bool{}, stop: func() {}}
	if progress == nil {
		return e
	}
	ew, err := b.kube.Events(b.ns).Watch(ctx, metav1.ListOptions{FieldSelector: podEventSelector(pod)})
	if err == nil {
		e.ch, e.stop = ew.ResultChan(), ew.Stop
	}
	return e
}

// received handles what the watch delivered: an event, or the end of the
// watch (open false).
func (e *podEvents) received(ev watch.Event, open bool) {
	if !open {
		e.ch = nil
	} else if k8sEv, isEvent := ev.Object.(*corev1.Event); isEvent && ev.Type != watch.Deleted {
		e.report(k8sEv)
	}
}

func (e *podEvents) report(ev *corev1.Event) {
	key := fmt.Sprintf("%s/%d", ev.UID, ev.Count)
	if !e.seen[key] {
		e.seen[key] = true
		reportEvent(e.progress, e.name, ev)
	}
}

// finish ends the watch, then reports the events recorded before the pod
// ran but delivered after (the kubelet sends them asynchronously), listed.
func (e *podEvents) finish(ctx context.Context) {
	e.stop()
	if e.progress == nil {
		return
	}
	lctx, cancel := e.b.reqCtx(context.WithoutCancel(ctx))
	defer cancel()
	evs, err := e.b.kube.Events(e.b.ns).List(lctx, metav1.ListOptions{FieldSelector: podEventSelector(e.pod)})
	if err != nil {
		return
	}
	items := evs.Items
	slices.SortStableFunc(items, func(a, c corev1.Event) int { return eventTime(a).Time.Compare(eventTime(c).Time) })
	for i := range items {
		e.report(&items[i])
	}
}

// checkStarted reports whether pod runs, or an error when it never will.
func (b *Backend) checkStarted(ctx context.Context, pod *corev1.Pod) (bool, error) {
	if pod.DeletionTimestamp != nil {
		return false, fmt.Errorf("%w: pod %s is being deleted", errStartFailed, pod.Name)
	}
	st := containerStatus(pod)
	switch {
	case st != nil && st.State.Running != nil:
		return true, nil
	case st != nil && st.State.Terminated != nil:
		t := st.State.Terminated
		return false, fmt.Errorf("%w: the container exited (reason %s, exit code %d%s) before Create returned; a sandbox needs a main process that keeps running%s",
			errStartFailed, t.Reason, t.ExitCode, suffix(": ", t.Message), b.eventSummary(ctx, pod))
	case st != nil && st.State.Waiting != nil && slices.Contains(fatalWaiting, st.State.Waiting.Reason):
		w := st.State.Waiting
		return false, fmt.Errorf("%w: %s%s%s%s", errStartFailed, w.Reason, suffix(": ", w.Message), hint(w.Reason), b.eventSummary(ctx, pod))
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		return false, fmt.Errorf("%w: pod phase %s%s%s", errStartFailed, pod.Status.Phase, suffix(": ", pod.Status.Message), b.eventSummary(ctx, pod))
	}
	return false, nil
}

func hint(reason string) string {
	switch reason {
	case "ImagePullBackOff", "ErrImageNeverPull":
		return " (check the image name, that the nodes can pull it (image_pull_secrets), or for images loaded on the nodes by hand image_pull_policy = \"IfNotPresent\")"
	case "RunContainerError", "CreateContainerError":
		return " (an entry without command needs /bin/sh in the image; give it a command otherwise)"
	}
	return ""
}

func suffix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

func containerStatus(pod *corev1.Pod) *corev1.ContainerStatus {
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == containerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// startTimeoutErr explains why a pod is not running when the start timeout
// (or the caller's context) ran out.
func (b *Backend) startTimeoutErr(ctx context.Context, pod *corev1.Pod) error {
	var why []string
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			why = append(why, "not scheduled: "+c.Reason+suffix(": ", c.Message))
		}
	}
	if st := containerStatus(pod); st != nil && st.State.Waiting != nil {
		why = append(why, "container waiting: "+st.State.Waiting.Reason+suffix(": ", st.State.Waiting.Message))
	}
	if len(why) == 0 {
		why = append(why, "phase "+string(pod.Status.Phase))
	}
	// The events are fetched on a context of their own: ctx is done.
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.requestTimeout())
	defer cancel()
	err := fmt.Errorf("%w: pod %s is not running after %v (%s)%s", errStartFailed, pod.Name,
		b.cfg.startTimeout(), strings.Join(why, "; "), b.eventSummary(ectx, pod))
	if cerr := context.Cause(ctx); cerr != nil && !errors.Is(cerr, context.DeadlineExceeded) {
		return errors.Join(err, cerr)
	}
	return err
}

// podEventSelector selects the events of the pod named name.
func podEventSelector(name string) string {
	return fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.name", name),
		fields.OneTermEqualSelector("involvedObject.kind", "Pod"),
	).String()
}

// reportEvent passes a pod event on as progress: image pulls as step
// "pull" (done when pulled or found present), the rest of the start as
// step "start" (done when the container started).
func reportEvent(progress func(backend.Progress), name string, e *corev1.Event) {
	p := backend.Progress{Sandbox: name, Step: "start", Status: e.Reason + suffix(": ", strings.TrimSpace(e.Message))}
	switch e.Reason {
	case "Pulling":
		p.Step = "pull"
	case "Pulled":
		p.Step, p.Done = "pull", true
	case "Started":
		p.Done = true
	}
	progress(p)
}

// eventSummary lists the pod's latest events as "; events: ...", or "".
func (b *Backend) eventSummary(ctx context.Context, pod *corev1.Pod) string {
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	evs, err := b.kube.Events(b.ns).List(rctx, metav1.ListOptions{FieldSelector: podEventSelector(pod.Name)})
	if err != nil || len(evs.Items) == 0 {
		return ""
	}
	items := evs.Items
	slices.SortStableFunc(items, func(a, c corev1.Event) int { return eventTime(a).Time.Compare(eventTime(c).Time) })
	if len(items) > 6 {
		items = items[len(items)-6:]
	}
	var parts []string
	for _, e := range items {
		parts = append(parts, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, strings.TrimSpace(e.Message)))
	}
	return "; events: " + strings.Join(parts, " | ")
}

func eventTime(e corev1.Event) metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.Time{Time: e.EventTime.Time}
	}
	return e.CreationTimestamp
}
