package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/sandboxkit/sandboxkit/backend"
)

// The operator's egress endpoints. A sandbox's policy comes from its
// type's config entry; only the operator (the admin key) can read its
// denials or change it while it runs, never the agent using it, whose
// API key does not open /admin.

// serveEgressStatus answers GET /admin/sandboxes/{id}/egress with the
// sandbox's policy and latest denied attempts (backend.EgressStatus).
func (s *Server) serveEgressStatus(w http.ResponseWriter, r *http.Request) {
	ec, id, ok := s.egressTarget(w, r)
	if !ok {
		return
	}
	st, err := ec.EgressStatus(r.Context(), id)
	if err != nil {
		writeEgressError(w, err)
		return
	}
	if st.Denials == nil {
		st.Denials = []backend.EgressDenial{}
	}
	writeJSON(w, http.StatusOK, st)
}

// serveSetEgress answers PUT /admin/sandboxes/{id}/egress: the body
// ({"default":"deny","allow":[...],"deny":[...]}) replaces the policy.
func (s *Server) serveSetEgress(w http.ResponseWriter, r *http.Request) {
	ec, id, ok := s.egressTarget(w, r)
	if !ok {
		return
	}
	var p backend.Egress
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		writeError(w, http.StatusBadRequest, "egress policy: "+err.Error()+` (want {"default":"deny"|"allow","allow":[...],"deny":[...]})`)
		return
	}
	if err := ec.SetEgress(r.Context(), id, p); err != nil {
		writeEgressError(w, err)
		return
	}
	s.opts.Logger.Info("egress policy changed by the operator", "sandbox", id, "default", p.Default, "allow", p.Allow, "deny", p.Deny)
	w.WriteHeader(http.StatusNoContent)
}

// egressTarget finds the backend's egress controls and checks that
// sandbox {id} is one of this server's.
func (s *Server) egressTarget(w http.ResponseWriter, r *http.Request) (backend.EgressController, string, bool) {
	id := r.PathValue("id")
	ec, ok := backend.AsBackend[backend.EgressController](s.opts.Backend)
	if !ok {
		writeError(w, http.StatusNotImplemented, fmt.Sprintf("the %s backend does not enforce egress policies", s.opts.Backend.Name()))
		return nil, "", false
	}
	sb, err := s.opts.Backend.Get(r.Context(), id)
	var info backend.Info
	if err == nil {
		info, err = sb.Info(r.Context())
	}
	if err != nil || info.Labels[LabelInstance] != s.opts.Instance {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q is not one of this server's", id))
		return nil, "", false
	}
	return ec, id, true
}

func writeEgressError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, backend.ErrInvalidConfig):
		code = http.StatusBadRequest
	case errors.Is(err, errors.ErrUnsupported):
		code = http.StatusConflict
	case errors.Is(err, backend.ErrNotFound):
		code = http.StatusNotFound
	}
	writeError(w, code, err.Error())
}
