package opensandbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/egress"
)

// Brokered credentials (Spec.Credentials) on OpenSandbox: the deployment's
// egress sidecar has a credential vault (its /credential-vault route) whose
// proxy adds a credential's value to the HTTPS requests a binding matches.
// Create passes an entry's declarations through to it once the sandbox
// runs: each credential's value (read from its source here, never put in
// the create request or the sandbox's environment) and a binding of its
// hosts (names and wildcards, with their ports) to where it goes. The
// vault puts values in headers only: a bearer token, basic auth, a header
// (apiKey), or a header whose value this backend formats (customHeaders);
// a credential for a query parameter, or hosts with port ranges, are
// refused naming what is missing. How the proxy's TLS is trusted in the
// sandbox, whether answers that echo a value are masked and what it
// records are the deployment's; placeholders are this backend's (random,
// in the credential's env). A deployment whose sidecar has no vault is
// refused at create, and the sandbox made for it removed.

type vaultCreateJSON struct {
	Credentials []vaultCredentialJSON `json:"credentials"`
	Bindings    []vaultBindingJSON    `json:"bindings"`
}

type vaultCredentialJSON struct {
	Name   string          `json:"name"`
	Source vaultSourceJSON `json:"source"`
}

type vaultSourceJSON struct {
	Type  string `json:"type"` // "inline"
	Value string `json:"value"`
}

type vaultBindingJSON struct {
	Name  string         `json:"name"`
	Match vaultMatchJSON `json:"match"`
	Auth  vaultAuthJSON  `json:"auth"`
}

type vaultMatchJSON struct {
	Hosts []string `json:"hosts"`
	Ports []int    `json:"ports,omitempty"`
}

type vaultAuthJSON struct {
	Type       string            `json:"type"` // bearer, basic, apiKey, customHeaders
	Name       string            `json:"name,omitempty"`
	Credential string            `json:"credential,omitempty"`
	Headers    []vaultHeaderJSON `json:"headers,omitempty"`
}

type vaultHeaderJSON struct {
	Name       string `json:"name"`
	Credential string `json:"credential"`
}

type vaultMutationJSON struct {
	Credentials struct {
		Replace []vaultCredentialJSON `json:"replace"`
	} `json:"credentials"`
}

// vaultBindings returns the vault's bindings of creds, or why the vault
// cannot express one. It reads no value.
func vaultBindings(creds []backend.Credential) ([]vaultBindingJSON, error) {
	var out []vaultBindingJSON
	for _, c := range creds {
		bind := vaultBindingJSON{Name: c.Name}
		ports := map[int]bool{}
		anyPort := false
		for _, h := range c.Hosts {
			r, err := egress.ParseRule(h)
			if err != nil {
				return nil, fmt.Errorf("%w: credential %s: host %q: %v", backend.ErrInvalidConfig, c.Name, h, err)
			}
			if r.Domain == "" {
				return nil, fmt.Errorf("%w: credential %s: host %q is an address; credentials go to names", backend.ErrInvalidConfig, c.Name, h)
			}
			name := r.Domain
			if r.Wildcard {
				name = "*." + name
			}
			bind.Match.Hosts = append(bind.Match.Hosts, name)
			if len(r.Ports) == 0 {
				anyPort = true
			}
			for _, p := range r.Ports {
				if p.Hi-p.Lo > 64 {
					return nil, fmt.Errorf("%w: credential %s: host %q: OpenSandbox's credential vault matches a list of ports, not a range this wide; name the ports", errors.ErrUnsupported, c.Name, h)
				}
				for n := int(p.Lo); n <= int(p.Hi); n++ {
					ports[n] = true
				}
			}
		}
		if len(ports) > 0 && anyPort {
			return nil, fmt.Errorf("%w: credential %s: some hosts name ports and some do not; OpenSandbox's vault binds one list of ports to all of a credential's hosts", errors.ErrUnsupported, c.Name)
		}
		bind.Match.Ports = slices.Sorted(maps.Keys(ports))
		switch vaultAuthType(c) {
		case "":
			return nil, fmt.Errorf("%w: credential %s: query = %q: OpenSandbox's credential vault puts values in headers only (bearer, basic, a header); use header = ... if the API takes one", errors.ErrUnsupported, c.Name, c.Query)
		case "basic":
			bind.Auth = vaultAuthJSON{Type: "basic", Credential: c.Name}
		case "bearer":
			bind.Auth = vaultAuthJSON{Type: "bearer", Credential: c.Name}
		case "apiKey":
			bind.Auth = vaultAuthJSON{Type: "apiKey", Name: c.Header, Credential: c.Name}
		default:
			// The value stored is the header's whole value.
			bind.Auth = vaultAuthJSON{Type: "customHeaders", Headers: []vaultHeaderJSON{{Name: c.Header, Credential: c.Name}}}
		}
		out = append(out, bind)
	}
	return out, nil
}

// vaultAuthType is the vault's auth type for c: basic, bearer, apiKey (a
// header holding the value as is) or customHeaders (a header whose value
// c's format shapes); "" for a query parameter, which it cannot place.
func vaultAuthType(c backend.Credential) string {
	switch {
	case c.Query != "":
		return ""
	case c.BasicUser != "":
		return "basic"
	case strings.EqualFold(c.Header, "Authorization") && c.Format == "Bearer {value}":
		return "bearer"
	case c.Format == "" || c.Format == "{value}":
		return "apiKey"
	}
	return "customHeaders"
}

// vaultCredentials reads creds' values from their sources, as the vault
// stores them (formatted for customHeaders, encoded for basic).
func vaultCredentials(ctx context.Context, creds []backend.Credential) ([]vaultCredentialJSON, error) {
	var out []vaultCredentialJSON
	for _, c := range creds {
		v, err := backendkit.CredentialValue(ctx, c)
		if err != nil {
			return nil, err
		}
		switch vaultAuthType(c) {
		case "basic":
			v = base64.StdEncoding.EncodeToString([]byte(c.BasicUser + ":" + v))
		case "customHeaders":
			v = strings.ReplaceAll(c.Format, "{value}", v)
		}
		out = append(out, vaultCredentialJSON{Name: c.Name, Source: vaultSourceJSON{Type: "inline", Value: v}})
	}
	return out, nil
}

// credentialEnv returns spec's environment with a placeholder in each
// credential's env.
func credentialEnv(spec backend.Spec) (map[string]string, error) {
	env := maps.Clone(spec.Env)
	for _, c := range spec.Credentials {
		if c.Env == "" {
			continue
		}
		ph, err := egress.PlaceholderFor(c.Name)
		if err != nil {
			return nil, err
		}
		if env == nil {
			env = map[string]string{}
		}
		env[c.Env] = ph
	}
	return env, nil
}

// openVault gives sandbox id's egress sidecar its credential vault.
func (b *Backend) openVault(ctx context.Context, id string, creds []vaultCredentialJSON, binds []vaultBindingJSON) error {
	x, err := b.egressSidecar(ctx, "create", id)
	if err != nil {
		return err
	}
	if err := x.json(ctx, http.MethodPost, "/credential-vault", nil, vaultCreateJSON{Credentials: creds, Bindings: binds}, nil); err != nil {
		return vaultErr(err, creds)
	}
	return nil
}

// vaultErr says what a refusal of the vault's route means, with none of
// creds' values (a server's message may quote what it was sent).
func vaultErr(err error, creds []vaultCredentialJSON) error {
	msg := err.Error()
	for _, c := range creds {
		if c.Source.Value != "" {
			msg = strings.ReplaceAll(msg, c.Source.Value, "[credential]")
		}
	}
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
			return fmt.Errorf("%w: the deployment's egress sidecar has no credential vault (/credential-vault answered %d): this OpenSandbox cannot broker credentials; upgrade it or remove the entry's credentials", errors.ErrUnsupported, ae.Status)
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%w: the deployment's credential proxy is not ready (%s); its operator must enable it", errors.ErrUnsupported, msg)
		}
	}
	return fmt.Errorf("credential vault: %s", msg)
}

// RotateCredentials reads creds' sources again and replaces their values
// in sandbox id's vault (backend.CredentialRotator). A failing source
// changes nothing.
func (b *Backend) RotateCredentials(ctx context.Context, id string, creds []backend.Credential) error {
	if _, err := vaultBindings(creds); err != nil {
		return b.opErr("rotate credentials", id, err)
	}
	values, err := vaultCredentials(ctx, creds)
	if err != nil {
		return b.opErr("rotate credentials", id, err)
	}
	x, err := b.egressSidecar(ctx, "rotate credentials", id)
	if err != nil {
		return err
	}
	var m vaultMutationJSON
	m.Credentials.Replace = values
	if err := x.json(ctx, http.MethodPatch, "/credential-vault", nil, m, nil); err != nil {
		return b.opErr("rotate credentials", id, vaultErr(err, values))
	}
	return nil
}

var _ backend.CredentialRotator = (*Backend)(nil)
