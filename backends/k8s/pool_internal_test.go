package k8s

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
)

// A claim's changes, as the claim annotation holds them, and how labelsOf
// applies them over the labels annotation (no cluster needed; the
// cluster's side is TestClaimLifecycle).
func TestClaimDelta(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	delta, err := claimDelta(backend.Claim{Session: "s", TTL: 90 * time.Minute, Labels: map[string]string{"a": "1", "gone": "", "example.com/k": "v"}}, at)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		backend.LabelPoolState: backend.PoolClaimed, backend.LabelOwner: "", backend.LabelSession: "s",
		backend.LabelExpiresAt: "2026-11-26T13:30:00Z", "a": "1", "gone": "", "example.com/k": "v",
	}, delta)

	base := map[string]string{backend.LabelID: "sbx-x", backend.LabelPool: "p", backend.LabelPoolState: backend.PoolReady,
		backend.LabelOwner: "keeper:1:1", "gone": "x", "kept": "y"}
	meta := metav1.ObjectMeta{Annotations: map[string]string{annotationLabels: encodeLabels(base), annotationClaim: encodeLabels(delta)}}
	assert.Equal(t, map[string]string{backend.LabelID: "sbx-x", backend.LabelPool: "p", backend.LabelPoolState: backend.PoolClaimed,
		backend.LabelSession: "s", backend.LabelExpiresAt: "2026-11-26T13:30:00Z", "a": "1", "kept": "y", "example.com/k": "v"},
		labelsOf(meta))

	_, err = claimDelta(backend.Claim{Labels: map[string]string{backend.LabelPool: "other"}}, at)
	assert.True(t, errors.Is(err, backend.ErrInvalidConfig), "a claim setting the pool label: %v", err)
}

func TestClaimPatch(t *testing.T) {
	var ops []map[string]any
	require.NoError(t, json.Unmarshal(claimPatch(backend.PoolReady, map[string]string{
		backend.LabelPoolState: backend.PoolClaimed, backend.LabelOwner: "", backend.LabelExpiresAt: "2026-11-26T13:30:00Z",
		"example.com/k": "v", "bad value": "x",
	}), &ops))
	var tests, adds []string
	for _, op := range ops {
		switch op["op"] {
		case "test":
			tests = append(tests, op["path"].(string))
		case "add":
			adds = append(adds, op["path"].(string))
		}
	}
	assert.Equal(t, "/metadata/labels/sandboxkit.pool.state", tests[0], "the state is tested first")
	assert.Equal(t, ops[0]["value"], backend.PoolReady)
	assert.Contains(t, tests, "/metadata/annotations/sandboxkit.io~1claim")
	// Kubernetes labels only for valid pairs ("" for a removed one); the
	// expiry (a time with colons) and a key with a space only in the
	// annotation.
	assert.ElementsMatch(t, []string{"/metadata/annotations/sandboxkit.io~1claim", "/metadata/labels/example.com~1k",
		"/metadata/labels/sandboxkit.owner", "/metadata/labels/sandboxkit.pool.state"}, adds)
}
