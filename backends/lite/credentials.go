package lite

import (
	"context"
	"path/filepath"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/atomicfile"
)

// Brokered credentials (backend.Credential): the values go to the
// sandbox's enforcer in a file of the sandbox's folder on the host, which
// only root reads; the sandbox gets the certificate of a CA made for it
// (in its trust store and a bundle the usual variables name) and a
// placeholder per credential (backendkit.PrepareCredentials). The CA's key
// and the values never enter the sandbox's root file system, environment
// or record.

// credentialsFile is the enforcer's credentials file in sandbox folder dir.
func credentialsFile(dir string) string { return filepath.Join(dir, "egress-credentials.json") }

// prepareCredentials prepares creds for sandbox id and writes the
// enforcer's file into dir; it returns the variables the sandbox gets and
// the CA's certificate.
func prepareCredentials(ctx context.Context, id, dir string, creds []backend.Credential) (env map[string]string, caPEM string, err error) {
	br, err := backendkit.PrepareCredentials(ctx, id, creds)
	if err != nil {
		return nil, "", err
	}
	// A temporary file (mode 0600) renamed over it: root's alone.
	if err := atomicfile.Write(credentialsFile(dir), br.EnforcerFile); err != nil {
		return nil, "", err
	}
	return br.Env, br.CAPEM, nil
}
