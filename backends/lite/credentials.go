package lite

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
)

// Brokered credentials (backend.Credential): the values go to the
// sandbox's enforcer in a file of the sandbox's folder on the host, which
// only root reads; the sandbox gets the certificate of a CA made for it
// (in its trust store and a bundle the usual variables name) and a
// placeholder per credential. The CA's key and the values never enter the
// sandbox's root file system, environment or record.

// credentialsFile is the enforcer's credentials file in sandbox folder dir.
func credentialsFile(dir string) string { return filepath.Join(dir, "egress-credentials.json") }

// Where the CA's certificate and the bundle go in the sandbox.
const (
	sandboxCAFile     = "/etc/sandboxkit/credentials-ca.pem"
	sandboxCABundle   = "/etc/sandboxkit/ca-bundle.pem"
	sandboxConfigDirs = "etc/sandboxkit"
)

// systemBundles are the trust stores of common images, relative to the
// root: the first that exists gets the CA too.
var systemBundles = []string{"etc/ssl/certs/ca-certificates.crt", "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/cert.pem"}

// prepareCredentials reads the values of creds, makes the sandbox's CA and
// a placeholder per credential, and writes the enforcer's file into dir. It
// returns the variables the sandbox gets and the CA's certificate (PEM).
func prepareCredentials(ctx context.Context, id, dir string, creds []backend.Credential) (env map[string]string, caPEM string, err error) {
	ca, err := egress.NewCA(id)
	if err != nil {
		return nil, "", err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, "", err
	}
	file := egressctl.Credentials{CACert: string(ca.CertPEM()), CAKey: string(key)}
	env = map[string]string{
		"SSL_CERT_FILE": sandboxCABundle, "REQUESTS_CA_BUNDLE": sandboxCABundle, "CURL_CA_BUNDLE": sandboxCABundle,
		"GIT_SSL_CAINFO": sandboxCABundle, "NODE_EXTRA_CA_CERTS": sandboxCAFile,
	}
	for _, c := range creds {
		v, err := backendkit.CredentialValue(ctx, c)
		if err != nil {
			return nil, "", err
		}
		ph, err := egress.PlaceholderFor(c.Name)
		if err != nil {
			return nil, "", err
		}
		if c.Env != "" {
			env[c.Env] = ph
		}
		file.Credentials = append(file.Credentials, egressctl.CredentialSpec{Name: c.Name, Hosts: c.Hosts, Header: c.Header, Format: c.Format,
			Query: c.Query, BasicUser: c.BasicUser, Placeholder: ph, Value: v})
	}
	if err := egressctl.WriteCredentials(credentialsFile(dir), file); err != nil {
		return nil, "", err
	}
	return env, string(ca.CertPEM()), nil
}

// installCA writes the CA's certificate, and a bundle of the image's trust
// store with it, into the root file system at rootfs (through an os.Root:
// the image's symlinks cannot lead out), and adds it to the image's trust
// store where it has one.
func installCA(rootfs, caPEM string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	var system []byte
	var systemPath string
	for _, p := range systemBundles {
		data, err := root.ReadFile(p)
		if err == nil {
			system, systemPath = data, p
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	bundle := append(append(system, '\n'), caPEM...)
	if err := root.MkdirAll(sandboxConfigDirs, 0o755); err != nil {
		return err
	}
	for p, data := range map[string][]byte{sandboxCAFile[1:]: []byte(caPEM), sandboxCABundle[1:]: bundle} {
		if err := root.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	if systemPath != "" {
		return root.WriteFile(systemPath, bundle, 0o644)
	}
	return nil
}
