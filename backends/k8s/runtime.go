package k8s

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// A pod's runtime is a RuntimeClass the cluster defines: runtime_class
// (every pod's) or one of runtime_classes (entries pick it with runtime).
// A runtime level (backend.RuntimeGVisor, ...) picks the configured class
// that gives it, known by the usual names ("gvisor", "runsc", "kata",
// "kata-fc", ...; see backend.RuntimeIsolation).

// classes are the RuntimeClasses the config names.
func (b *Backend) classes() []string {
	return slices.DeleteFunc(append([]string{b.cfg.RuntimeClass}, b.cfg.RuntimeClasses...), func(s string) bool { return s == "" })
}

// levelClass is the configured class that gives level ("" when none).
func levelClass(level string, classes []string) string {
	var want backend.Isolation
	switch level {
	case backend.RuntimeGVisor:
		want = backend.IsolationGVisor
	case backend.RuntimeKata, backend.RuntimeFirecracker:
		want = backend.IsolationVM
	default:
		return ""
	}
	for _, c := range classes {
		if backend.RuntimeIsolation(c) == want && (want != backend.IsolationVM || isFirecracker(c) == (level == backend.RuntimeFirecracker)) {
			return c
		}
	}
	return ""
}

func isFirecracker(class string) bool {
	return backend.RuntimeIsolation(class) == backend.IsolationVM && (containsFold(class, "fc") || containsFold(class, "firecracker"))
}

// offeredRuntimes are the configured classes and the levels they give.
func offeredRuntimes(classes []string) []string {
	out := slices.Clone(classes)
	for _, level := range []string{backend.RuntimeGVisor, backend.RuntimeKata, backend.RuntimeFirecracker} {
		if levelClass(level, classes) != "" && !slices.Contains(out, level) {
			out = append(out, level)
		}
	}
	return out
}

// runtimeHint says how to give the backend a runtime, for refusals.
const runtimeHint = "name the cluster's RuntimeClass for it in [sandbox.k8s] runtime_classes " +
	`(e.g. runtime_classes = ["gvisor"] for a class whose handler is runsc)`

// podClass is the RuntimeClass of spec's pod ("" for the cluster's
// default): Spec.Runtime (a level mapped to its class), else
// runtime_class.
func (b *Backend) podClass(spec backend.Spec) (string, error) {
	rt := cmpOr(spec.Runtime, b.cfg.RuntimeClass)
	if rt == "" || slices.Contains(b.classes(), rt) {
		return rt, nil
	}
	if c := levelClass(rt, b.classes()); c != "" {
		return c, nil
	}
	return "", fmt.Errorf("%w: runtime %q: no configured RuntimeClass gives it; %s", backend.ErrInvalidConfig, rt, runtimeHint)
}

func containsFold(s, sub string) bool { return strings.Contains(strings.ToLower(s), sub) }
