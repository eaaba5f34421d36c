package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// OpenSandbox's egress sidecar API (egress-api.yaml) on port
// OSBEgressPort of every sandbox, served by this server over the backend's
// egress controls (backend.EgressController):
//
//	GET    /policy   the policy as {status, mode, enforcementMode, policy}
//	PATCH  /policy   merge rules (an incoming rule replaces one of its target)
//	DELETE /policy   remove the rules of the targets given
//
// As on the real server, a sandbox made without a policy has no sidecar:
// its egress API answers 502. Rules become sandboxkit's: an "allow" rule
// an Allow entry, a "deny" rule a Deny entry (deny wins over allow in
// sandboxkit whatever the order, where the sidecar takes the first match).

// OSBEgressPort is the port of the egress sidecar's API in an OpenSandbox
// sandbox; the SDKs ask for its endpoint when they create or connect.
const OSBEgressPort = 18080

// osbRule is a NetworkRule.
type osbRule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// osbPolicy is a NetworkPolicy.
type osbPolicy struct {
	DefaultAction string    `json:"defaultAction,omitempty"`
	Egress        []osbRule `json:"egress"`
}

// osbPolicyOf is p as a NetworkPolicy: deny rules first, as they win.
func osbPolicyOf(p backend.Egress) osbPolicy {
	out := osbPolicy{DefaultAction: "deny", Egress: []osbRule{}}
	if p.Default == "allow" {
		out.DefaultAction = "allow"
	}
	for _, t := range p.Deny {
		out.Egress = append(out.Egress, osbRule{"deny", t})
	}
	for _, t := range p.Allow {
		out.Egress = append(out.Egress, osbRule{"allow", t})
	}
	return out
}

// egress is the NetworkPolicy p as sandboxkit's policy. A target named
// twice keeps its first rule, as the sidecar's patch does.
func (p osbPolicy) egress() (backend.Egress, error) {
	var e backend.Egress
	switch p.DefaultAction {
	case "", "deny":
		e.Default = "deny"
	case "allow":
		e.Default = "allow"
	default:
		return e, fmt.Errorf("defaultAction %q: want allow or deny", p.DefaultAction)
	}
	seen := map[string]bool{}
	for _, r := range p.Egress {
		if r.Target == "" {
			return e, errors.New("a rule has no target")
		}
		if seen[r.Target] {
			continue
		}
		seen[r.Target] = true
		switch r.Action {
		case "allow":
			e.Allow = append(e.Allow, r.Target)
		case "deny":
			e.Deny = append(e.Deny, r.Target)
		default:
			return e, fmt.Errorf("rule for %s: action %q: want allow or deny", r.Target, r.Action)
		}
	}
	return e, nil
}

// osbEgressStatus is a PolicyStatusResponse.
func osbEgressStatus(p backend.Egress) map[string]any {
	pol := osbPolicyOf(p)
	mode := "deny_all"
	if pol.DefaultAction == "allow" {
		mode = "allow_all"
	}
	return map[string]any{"status": "ok", "mode": mode, "enforcementMode": "dns", "policy": pol}
}

// osbEgress serves the egress API's path p for conv's sandbox id.
func (s *Server) osbEgress(w http.ResponseWriter, r *http.Request, conv, id, p string) {
	release, ok := s.admitBody(w, r, maxSmallBody, osbFail)
	if !ok {
		return
	}
	defer release()
	err := s.withBox(r.Context(), conv, id, func(ctx context.Context, b *box) error {
		if p == "/credential-vault" || strings.HasPrefix(p, "/credential-vault/") {
			// OpenSandbox's vault takes values from its API's caller; here
			// that is the agent, and credentials are the operator's.
			dropBody(w, r)
			osbError(w, http.StatusForbidden, "FORBIDDEN", "credentials are the operator's: sbx serve brokers those its config declares for the sandbox's type ([sandbox.sandboxes.NAME.credentials.KEY]); its API can neither set nor read them")
			return nil
		}
		if p != "/policy" {
			osbError(w, http.StatusNotFound, "NOT_FOUND", "the egress API of sandboxkit serves /policy only")
			return nil
		}
		ec, ok := backend.AsBackend[backend.EgressController](s.opts.Backend)
		if !ok {
			dropBody(w, r)
			osbError(w, http.StatusBadGateway, "EGRESS_UNAVAILABLE", "sandbox %s has no egress sidecar: the %s backend enforces no egress policies", id, s.opts.Backend.Name())
			return nil
		}
		st, err := ec.EgressStatus(ctx, b.sb.ID())
		if err != nil {
			dropBody(w, r)
			osbError(w, http.StatusBadGateway, "EGRESS_UNAVAILABLE", "sandbox %s has no egress sidecar (it was created without a networkPolicy): %v", id, err)
			return nil
		}
		pol := osbPolicyOf(st.Policy)
		switch r.Method {
		case http.MethodGet:
		case http.MethodPatch:
			var rules []osbRule
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSmallBody)).Decode(&rules); err != nil || len(rules) == 0 {
				osbError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "want a non-empty array of {action, target} rules: %v", err)
				return nil
			}
			// Incoming rules first: they win over the current ones.
			pol.Egress = append(rules, pol.Egress...)
		case http.MethodDelete:
			var targets []string
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSmallBody)).Decode(&targets); err != nil || len(targets) == 0 {
				osbError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "want a non-empty array of targets: %v", err)
				return nil
			}
			pol.Egress = slices.DeleteFunc(pol.Egress, func(r osbRule) bool { return slices.Contains(targets, r.Target) })
		default:
			osbError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "/policy takes GET, PATCH and DELETE")
			return nil
		}
		if r.Method != http.MethodGet {
			next, err := pol.egress()
			if err == nil {
				next, err = s.osbWithinOperator(next)
			}
			if spec, serr := s.typeSpec(b.typ); err == nil && serr == nil && spec.Egress != nil {
				next, err = withinBound(next, *spec.Egress)
			}
			if err != nil {
				osbError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "%v", err)
				return nil
			}
			if err := ec.SetEgress(ctx, b.sb.ID(), next); err != nil {
				if errors.Is(err, backend.ErrInvalidConfig) {
					osbError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "%v", err)
					return nil
				}
				return err
			}
			st.Policy = next
		}
		writeJSON(w, http.StatusOK, osbEgressStatus(st.Policy))
		return nil
	})
	if err != nil {
		s.osbFail(w, err, "EGRESS_FAILED")
	}
}

// osbWithinOperator returns the agent's policy p within the operator's
// bound (Options.OSBEgressBound), if any.
func (s *Server) osbWithinOperator(p backend.Egress) (backend.Egress, error) {
	if s.opts.OSBEgressBound == nil {
		return p, nil
	}
	return withinBound(p, *s.opts.OSBEgressBound)
}

// withinBound returns policy p inside bound: bound's deny rules are added
// to p, and with a deny-by-default bound p must deny by default and allow
// only targets bound allows (any other allow rule is refused).
func withinBound(p, bound backend.Egress) (backend.Egress, error) {
	p.Allow, p.Deny = slices.Clone(p.Allow), slices.Clone(p.Deny)
	if bound.Default != "allow" {
		if p.Default == "allow" {
			return p, fmt.Errorf("defaultAction allow: the operator's policy denies by default; allow targets one by one (the operator allows %v)", bound.Allow)
		}
		for _, t := range p.Allow {
			if !slices.Contains(bound.Allow, t) {
				return p, fmt.Errorf("allow %s: the operator's policy does not allow it (the operator allows %v)", t, bound.Allow)
			}
		}
	}
	for _, t := range bound.Deny {
		if !slices.Contains(p.Deny, t) {
			p.Deny = append(p.Deny, t)
		}
	}
	return p, nil
}
