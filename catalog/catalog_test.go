package catalog_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/catalog/core"
)

// What sbx knows of the k8s backend without linking it is what the
// backend says of itself, so that a config parses alike in sbx and
// sbx-full (or is handed over).
func TestCoreKnowsK8s(t *testing.T) {
	assert.Equal(t, k8s.Factory.Name, core.K8s.Name)
	assert.Equal(t, k8s.Factory.Aliases, core.K8s.Aliases)
	assert.Equal(t, k8s.Factory.EntryExtraKeys, core.K8s.EntryExtraKeys)
	assert.Equal(t, k8s.Factory.EntryTTLKey, core.K8s.EntryTTLKey)
}
