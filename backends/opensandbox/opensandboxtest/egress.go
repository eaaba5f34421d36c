package opensandboxtest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
)

// The egress sidecar of a sandbox created with a networkPolicy, as far as
// its policy API goes (egress-api.yaml's /policy: GET, PATCH with merge
// semantics, DELETE by target), behind the endpoint of EgressPort with an
// OPENSANDBOX-EGRESS-AUTH header the endpoints API hands out. Like the
// rest of this server it enforces nothing: its sandboxes share the host's
// network.

// EgressPort is the sandbox port of the egress sidecar.
const EgressPort = 18080

const headerEgressAuth = "OPENSANDBOX-EGRESS-AUTH"

// NetworkPolicy is the create request's networkPolicy and the sidecar's
// policy.
type NetworkPolicy struct {
	DefaultAction string        `json:"defaultAction,omitempty"`
	Egress        []NetworkRule `json:"egress"`
}

// NetworkRule is one rule of a NetworkPolicy.
type NetworkRule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

type egressSidecar struct {
	token string
	srv   *httptest.Server

	mu     sync.Mutex
	policy NetworkPolicy
}

// checkPolicy validates a networkPolicy as the request model does.
func checkPolicy(p NetworkPolicy) []validationError {
	var errs []validationError
	if p.DefaultAction != "" && p.DefaultAction != "allow" && p.DefaultAction != "deny" {
		errs = append(errs, validationError{Type: "enum", Loc: []any{"body", "networkPolicy", "defaultAction"}, Msg: "Input should be 'allow' or 'deny'", Input: p.DefaultAction})
	}
	for i, r := range p.Egress {
		if r.Action != "allow" && r.Action != "deny" {
			errs = append(errs, validationError{Type: "enum", Loc: []any{"body", "networkPolicy", "egress", i, "action"}, Msg: "Input should be 'allow' or 'deny'", Input: r.Action})
		}
		if r.Target == "" {
			errs = append(errs, validationError{Type: "missing", Loc: []any{"body", "networkPolicy", "egress", i, "target"}, Msg: "Field required"})
		}
	}
	return errs
}

func newEgressSidecar(p NetworkPolicy) *egressSidecar {
	b := make([]byte, 16)
	rand.Read(b)
	if p.DefaultAction == "" {
		p.DefaultAction = "deny"
	}
	e := &egressSidecar{token: hex.EncodeToString(b), policy: p}
	e.srv = httptest.NewServer(e.routes())
	return e
}

func (e *egressSidecar) status() map[string]any {
	mode := "deny_all"
	if e.policy.DefaultAction == "allow" {
		mode = "allow_all"
	}
	return map[string]any{"status": "ok", "mode": mode, "enforcementMode": "dns", "policy": e.policy}
}

func (e *egressSidecar) routes() http.Handler {
	mux := http.NewServeMux()
	auth := func(h func(w http.ResponseWriter, r *http.Request)) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(headerEgressAuth) != e.token {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /policy", auth(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		writeJSON(w, http.StatusOK, e.status())
	}))
	mux.HandleFunc("PATCH /policy", auth(func(w http.ResponseWriter, r *http.Request) {
		var in []NetworkRule
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil || len(in) == 0 {
			http.Error(w, "want a non-empty list of rules", http.StatusBadRequest)
			return
		}
		if errs := checkPolicy(NetworkPolicy{Egress: in}); len(errs) > 0 {
			http.Error(w, errs[0].Msg, http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		// Incoming rules come first; the first of a target wins.
		var merged []NetworkRule
		seen := map[string]bool{}
		for _, rule := range append(slices.Clone(in), e.policy.Egress...) {
			if !seen[rule.Target] {
				seen[rule.Target] = true
				merged = append(merged, rule)
			}
		}
		e.policy.Egress = merged
		writeJSON(w, http.StatusOK, e.status())
	}))
	mux.HandleFunc("DELETE /policy", auth(func(w http.ResponseWriter, r *http.Request) {
		var targets []string
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&targets); err != nil || len(targets) == 0 {
			http.Error(w, "want a non-empty list of targets", http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.policy.Egress = slices.DeleteFunc(e.policy.Egress, func(rule NetworkRule) bool { return slices.Contains(targets, rule.Target) })
		writeJSON(w, http.StatusOK, e.status())
	}))
	return mux
}

// EgressPolicy returns the policy sandbox id's egress sidecar holds, and
// whether it has one.
func (s *Server) EgressPolicy(id string) (NetworkPolicy, bool) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil || sb.egress == nil {
		return NetworkPolicy{}, false
	}
	sb.egress.mu.Lock()
	defer sb.egress.mu.Unlock()
	p := sb.egress.policy
	p.Egress = slices.Clone(p.Egress)
	return p, true
}

// endpoint is the sidecar's address, as the endpoints API gives it.
func (e *egressSidecar) endpoint() map[string]any {
	return map[string]any{"endpoint": strings.TrimPrefix(e.srv.URL, "http://"), "headers": map[string]string{headerEgressAuth: e.token}}
}
