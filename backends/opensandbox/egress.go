package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/egress"
)

// Egress policies (Spec.Egress) on OpenSandbox: the deployment enforces
// them with its egress sidecar. The policy goes in the create request's
// networkPolicy; SetEgress and EgressStatus talk to the sidecar's /policy
// (its port's endpoint, from the lifecycle API, with the headers that
// come with it). What OpenSandbox's policies can say is narrower than
// sandboxkit's: names and wildcards only, on every port, so rules with
// ports or addresses are refused; the default cannot change while the
// sandbox runs; the sidecar records no denials. How strictly it enforces
// (DNS filtering only, or with its nftables mode) is the deployment's.

// EgressPort is the sandbox port OpenSandbox's egress sidecar serves its
// policy API on.
const EgressPort = 18080

// labelEgress marks a sandbox made with a policy (so with a sidecar).
const labelEgress = labelPrefix + "egress"

// networkPolicyJSON is the lifecycle API's NetworkPolicy, also the egress
// sidecar's.
type networkPolicyJSON struct {
	DefaultAction string            `json:"defaultAction,omitempty"`
	Egress        []networkRuleJSON `json:"egress"`
}

type networkRuleJSON struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// policyStatusJSON is the sidecar's answer.
type policyStatusJSON struct {
	Status string             `json:"status"`
	Mode   string             `json:"mode"`
	Policy *networkPolicyJSON `json:"policy"`
}

// networkPolicy turns a policy into OpenSandbox's: deny rules first (its
// rules are evaluated in order; sandboxkit's deny rules win).
func networkPolicy(e backend.Egress) (*networkPolicyJSON, error) {
	p, err := egress.NewPolicy(e.Default, e.Allow, e.Deny)
	if err != nil {
		return nil, fmt.Errorf("%w: egress: %v", backend.ErrInvalidConfig, err)
	}
	out := &networkPolicyJSON{DefaultAction: p.Default, Egress: []networkRuleJSON{}}
	for _, list := range []struct {
		action string
		rules  []egress.Rule
	}{{"deny", p.Deny}, {"allow", p.Allow}} {
		for _, r := range list.rules {
			switch {
			case r.Prefix.IsValid():
				return nil, fmt.Errorf("%w: egress %s rule %q: OpenSandbox's egress sidecar takes names only (no addresses or CIDRs)", errors.ErrUnsupported, list.action, r.Text)
			case len(r.Ports) > 0:
				return nil, fmt.Errorf("%w: egress %s rule %q: OpenSandbox's egress sidecar takes no ports (a name's rule covers every port); drop the port", errors.ErrUnsupported, list.action, r.Text)
			}
			target := r.Domain
			if r.Wildcard {
				target = "*." + target
			}
			out.Egress = append(out.Egress, networkRuleJSON{Action: list.action, Target: target})
		}
	}
	return out, nil
}

// policyOf turns OpenSandbox's policy back into sandboxkit's.
func policyOf(np *networkPolicyJSON) backend.Egress {
	e := backend.Egress{Default: egress.Deny}
	if np == nil {
		return backend.Egress{Default: egress.Allow} // none: allow all
	}
	if np.DefaultAction == egress.Allow {
		e.Default = egress.Allow
	}
	seen := map[string]bool{}
	for _, r := range np.Egress {
		if seen[r.Target] {
			continue // the first rule of a target wins
		}
		seen[r.Target] = true
		if r.Action == "deny" {
			e.Deny = append(e.Deny, r.Target)
		} else {
			e.Allow = append(e.Allow, r.Target)
		}
	}
	return e
}

var _ backend.EgressController = (*Backend)(nil)

// egressSidecar returns a client of sandbox id's egress sidecar, which it
// must have.
func (b *Backend) egressSidecar(ctx context.Context, op, id string) (*execd, error) {
	got, err := b.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	s := got.(*Sandbox)
	if !s.egress {
		return nil, b.opErr(op, id, fmt.Errorf("%w: sandbox %s was made without an egress policy, so it has no egress sidecar (create it with one: egress = {...} in its entry)", errors.ErrUnsupported, id))
	}
	ep, err := s.endpoint(ctx, EgressPort, b.cfg.UseServerProxy)
	if err != nil {
		return nil, b.opErr(op, id, err)
	}
	x, err := b.c.newExecd(ep, b.cfg.UseServerProxy, "")
	if err != nil {
		return nil, b.opErr(op, id, err)
	}
	x.service = ServiceEgress
	return x, nil
}

// EgressStatus returns sandbox id's policy as its sidecar enforces it
// (backend.EgressController). The sidecar records no denials.
func (b *Backend) EgressStatus(ctx context.Context, id string) (backend.EgressStatus, error) {
	x, err := b.egressSidecar(ctx, "egress status", id)
	if err != nil {
		return backend.EgressStatus{}, err
	}
	var st policyStatusJSON
	if err := x.json(ctx, http.MethodGet, "/policy", nil, nil, &st); err != nil {
		return backend.EgressStatus{}, b.opErr("egress status", id, err)
	}
	return backend.EgressStatus{Policy: policyOf(st.Policy)}, nil
}

// SetEgress replaces sandbox id's policy (backend.EgressController): the
// sidecar's rules that the new policy lacks are deleted first, then the
// new rules are merged in (its API has no replace), so that the policy in
// between is never wider than either.
func (b *Backend) SetEgress(ctx context.Context, id string, policy backend.Egress) error {
	want, err := networkPolicy(policy)
	if err != nil {
		return b.opErr("set egress", id, err)
	}
	x, err := b.egressSidecar(ctx, "set egress", id)
	if err != nil {
		return err
	}
	var st policyStatusJSON
	if err := x.json(ctx, http.MethodGet, "/policy", nil, nil, &st); err != nil {
		return b.opErr("set egress", id, err)
	}
	cur := policyOf(st.Policy)
	if cur.Default != want.DefaultAction {
		return b.opErr("set egress", id, fmt.Errorf("%w: egress default %q: OpenSandbox's egress sidecar cannot change the default (%q) of a running sandbox; create a new one", errors.ErrUnsupported, want.DefaultAction, cur.Default))
	}
	var gone []string
	for _, t := range append(cur.Deny, cur.Allow...) {
		if !slices.ContainsFunc(want.Egress, func(r networkRuleJSON) bool { return r.Target == t }) {
			gone = append(gone, t)
		}
	}
	if len(gone) > 0 {
		if err := x.json(ctx, http.MethodDelete, "/policy", nil, gone, nil); err != nil {
			return b.opErr("set egress", id, err)
		}
	}
	if len(want.Egress) > 0 {
		if err := x.json(ctx, http.MethodPatch, "/policy", nil, want.Egress, nil); err != nil {
			return b.opErr("set egress", id, err)
		}
	}
	return nil
}
