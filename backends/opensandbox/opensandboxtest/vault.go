package opensandboxtest

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
)

// Vault is a sandbox's credential vault as the stand-in sidecar holds it:
// the values it was given (which OpenSandbox's API never returns) and the
// bindings, as sent.
type Vault struct {
	Revision int
	Values   map[string]string // credential name -> value
	Bindings []json.RawMessage
}

// Vault returns a copy of sandbox id's credential vault, and whether it
// has one.
func (s *Server) Vault(id string) (Vault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vaults[id]
	if !ok {
		return Vault{}, false
	}
	out := Vault{Revision: v.Revision, Values: map[string]string{}, Bindings: slices.Clone(v.Bindings)}
	for k, val := range v.Values {
		out.Values[k] = val
	}
	return out, true
}

type vaultCredential struct {
	Name   string `json:"name"`
	Source struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	} `json:"source"`
}

// vault serves the credential vault routes of OpenSandbox's egress API
// (a deployment without one answers 404).
func (s *Server) vault(w http.ResponseWriter, r *http.Request, t target) {
	if !s.opts.CredentialVault {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		return
	}
	s.count("egress " + r.Method + " /credential-vault")
	var body struct {
		Credentials json.RawMessage   `json:"credentials"`
		Bindings    []json.RawMessage `json:"bindings"`
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPatch {
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"code": "BAD_REQUEST", "message": err.Error()})
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vaults == nil {
		s.vaults = map[string]*Vault{}
	}
	v := s.vaults[t.id]
	switch {
	case r.Method == http.MethodPost && t.path == "/credential-vault":
		if v != nil {
			writeJSON(w, http.StatusConflict, map[string]string{"code": "CONFLICT", "message": "the vault exists"})
			return
		}
		var creds []vaultCredential
		if err := json.Unmarshal(body.Credentials, &creds); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"code": "BAD_REQUEST", "message": "credentials: " + err.Error()})
			return
		}
		v = &Vault{Revision: 1, Values: map[string]string{}, Bindings: body.Bindings}
		for _, c := range creds {
			v.Values[c.Name] = c.Source.Value
		}
		s.vaults[t.id] = v
		writeJSON(w, http.StatusCreated, v.state())
	case r.Method == http.MethodPatch && t.path == "/credential-vault":
		if v == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"code": "NOT_FOUND", "message": "no vault"})
			return
		}
		var m struct {
			Replace []vaultCredential `json:"replace"`
		}
		if len(body.Credentials) > 0 {
			if err := json.Unmarshal(body.Credentials, &m); err != nil {
				writeJSON(w, http.StatusBadRequest, map[string]string{"code": "BAD_REQUEST", "message": "credentials: " + err.Error()})
				return
			}
		}
		for _, c := range m.Replace {
			if _, ok := v.Values[c.Name]; !ok {
				writeJSON(w, http.StatusBadRequest, map[string]string{"code": "BAD_REQUEST", "message": "no credential " + c.Name})
				return
			}
		}
		for _, c := range m.Replace {
			v.Values[c.Name] = c.Source.Value
		}
		v.Revision++
		writeJSON(w, http.StatusOK, v.state())
	case r.Method == http.MethodGet && t.path == "/credential-vault":
		if v == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"code": "NOT_FOUND", "message": "no vault"})
			return
		}
		writeJSON(w, http.StatusOK, v.state())
	case r.Method == http.MethodDelete && t.path == "/credential-vault":
		delete(s.vaults, t.id)
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	}
}

// state is the vault's sanitized state: names and revisions, no values.
func (v *Vault) state() map[string]any {
	var creds []map[string]any
	for _, name := range slices.Sorted(maps.Keys(v.Values)) {
		creds = append(creds, map[string]any{"name": name, "sourceType": "inline", "revision": v.Revision})
	}
	return map[string]any{"revision": v.Revision, "credentials": creds, "bindings": []any{}}
}
