package lite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/atomicfile"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
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

// RotateCredentials reads creds' sources again and gives the values to
// sandbox id's enforcer (backend.CredentialRotator): the file is rewritten
// (for the enforcer's restarts) and the values sent over its control
// socket, since an enforcer that gave up root cannot read the file again.
// A failing source changes nothing.
func (b *Backend) RotateCredentials(ctx context.Context, id string, creds []backend.Credential) error {
	sb, _, err := b.egressSandbox(ctx, "rotate credentials", id)
	if err != nil {
		return err
	}
	file := credentialsFile(sb.dir)
	old, err := os.ReadFile(file)
	if err != nil {
		return sb.opErr("rotate credentials", fmt.Errorf("%w: the sandbox was made without credentials (%v)", backend.ErrInvalidConfig, err))
	}
	data, err := backendkit.RotatedFile(ctx, old, creds)
	if err != nil {
		return sb.opErr("rotate credentials", err)
	}
	var c egressctl.Credentials
	if err := json.Unmarshal(data, &c); err != nil {
		return sb.opErr("rotate credentials", err)
	}
	// The enforcer first: if it refuses, the file keeps what it brokers.
	if err := egressctl.SetCredentials(ctx, egressctl.PathsIn(sb.dir).Control, c); err != nil {
		return sb.opErr("rotate credentials", err)
	}
	if err := atomicfile.Write(file, data); err != nil {
		return sb.opErr("rotate credentials", err)
	}
	return nil
}
