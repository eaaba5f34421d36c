package k8s

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// writeKubeconfig writes a kubeconfig whose contexts (name -> namespace)
// all point at one unreachable server; the first is current.
func writeKubeconfig(t *testing.T, contexts ...[2]string) string {
	t.Helper()
	text := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n" +
		"users:\n- name: u\n  user:\n    token: t\ncurrent-context: " + contexts[0][0] + "\ncontexts:\n"
	for _, c := range contexts {
		text += "- name: " + c[0] + "\n  context:\n    cluster: c\n    user: u\n    namespace: " + c[1] + "\n"
	}
	p := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// OpenSage's OPENSAGE_K8S_* variables fill what the config leaves empty:
// the config wins over them, and OPENSAGE_K8S_KUBECONFIG over KUBECONFIG.
func TestOpenSageEnvironment(t *testing.T) {
	standard := writeKubeconfig(t, [2]string{"std", "from-kubeconfig"})
	opensage := writeKubeconfig(t, [2]string{"sage", "from-sage"}, [2]string{"sage-2", "from-sage-2"})
	tests := []struct {
		name            string
		cfg             Config
		kubeconfig, ctx string // OPENSAGE_K8S_KUBECONFIG, OPENSAGE_K8S_CONTEXT
		namespace, want string // OPENSAGE_K8S_NAMESPACE; the namespace used
	}{
		{name: "KUBECONFIG alone", want: "from-kubeconfig"},
		{name: "OPENSAGE_K8S_KUBECONFIG before KUBECONFIG", kubeconfig: opensage, want: "from-sage"},
		{name: "OPENSAGE_K8S_CONTEXT", kubeconfig: opensage, ctx: "sage-2", want: "from-sage-2"},
		{name: "OPENSAGE_K8S_NAMESPACE", kubeconfig: opensage, namespace: "agents", want: "agents"},
		{name: "the config wins", cfg: Config{Kubeconfig: standard, Namespace: "mine"}, kubeconfig: opensage, namespace: "agents", want: "mine"},
		{name: "the config's context wins", cfg: Config{Context: "sage"}, kubeconfig: opensage, ctx: "sage-2", want: "from-sage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvKubeconfig, standard)
			t.Setenv(EnvOpenSageKubeconfig, tt.kubeconfig)
			t.Setenv(EnvOpenSageContext, tt.ctx)
			t.Setenv(EnvOpenSageNamespace, tt.namespace)
			b, err := New(tt.cfg)
			require.NoError(t, err)
			assert.Equal(t, tt.want, b.Namespace())
		})
	}

	// The fillers of volumes: image and claim size; the config wins.
	t.Setenv(EnvKubeconfig, standard)
	t.Setenv(EnvOpenSageInitImage, "alpine:3.19")
	t.Setenv(EnvOpenSagePVCSize, "5Gi")
	b, err := New(Config{})
	require.NoError(t, err)
	assert.Equal(t, "alpine:3.19", b.cfg.helperImage())
	size := b.cfg.volumeSize()
	assert.Equal(t, "5Gi", size.String())
	b, err = New(Config{HelperImage: "busybox:1.37", VolumeSize: "2Gi"})
	require.NoError(t, err)
	assert.Equal(t, "busybox:1.37", b.cfg.helperImage())
	size = b.cfg.volumeSize()
	assert.Equal(t, "2Gi", size.String())
	t.Setenv(EnvOpenSagePVCSize, "lots")
	_, err = New(Config{})
	assert.ErrorContains(t, err, `$OPENSAGE_K8S_PVC_SIZE (the [sandbox.k8s] volume_size): "lots" is not a quantity`)
	t.Setenv(EnvOpenSagePVCSize, "")

	t.Setenv(EnvOpenSageKubeconfig, filepath.Join(t.TempDir(), "missing"))
	_, err = New(Config{})
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, "$OPENSAGE_K8S_KUBECONFIG (the [sandbox.k8s] kubeconfig): ")
	t.Setenv(EnvOpenSageKubeconfig, "")
	t.Setenv(EnvOpenSageNamespace, "Not_A_Namespace")
	_, err = New(Config{})
	assert.ErrorContains(t, err, `$OPENSAGE_K8S_NAMESPACE (the [sandbox.k8s] namespace): "Not_A_Namespace" is not a namespace name`)
}
