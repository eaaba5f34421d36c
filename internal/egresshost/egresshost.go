// Package egresshost converts the egress enforcer's wire types
// (internal/egressctl, which the in-sandbox agent links) to the contract's
// (package backend), for the backends that run enforcers. A policy converts
// directly, as the two have the same fields: egressctl.Policy(spec).
package egresshost

import (
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
)

// Denials converts refused attempts.
func Denials(ds []egressctl.Denial) []backend.EgressDenial {
	if ds == nil {
		return nil
	}
	out := make([]backend.EgressDenial, len(ds))
	for i, d := range ds {
		out[i] = backend.EgressDenial(d)
	}
	return out
}

// Status converts an enforcer's status.
func Status(st egressctl.Status) backend.EgressStatus {
	return backend.EgressStatus{Policy: backend.Egress(st.Policy), Denials: Denials(st.Denials)}
}
