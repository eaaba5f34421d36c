package k8s_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// runtime = "gvisor" reaches the API server as the pod's RuntimeClass (the
// configured class that gives it); a cluster without that RuntimeClass
// refuses the pod, and the error names the class and what to do. (The
// harness cluster has no gVisor class: gVisor's containerd shim sets its
// own oom_score_adj to -999, which needs CAP_SYS_RESOURCE, absent from
// these machines' bounding set; see docs/isolation.md.)
func TestRuntimeClassMissing(t *testing.T) {
	t.Parallel()
	c := k8stest.Get(t)
	b := openBackend(t, c, c.Namespace(t), func(cfg *k8s.Config) { cfg.RuntimeClasses = []string{"gvisor"} })
	s := spec("gvisor", k8stest.BusyboxImage)
	s.Runtime = backend.RuntimeGVisor
	_, err := b.Create(t.Context(), s)
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	require.Contains(t, err.Error(), `RuntimeClass "gvisor" not found`)
	require.Contains(t, err.Error(), "handler runsc")
	require.NotContains(t, err.Error(), "RBAC", "a missing RuntimeClass is not a permissions problem")
}
