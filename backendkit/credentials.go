package backendkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
)

// credentialCommandTimeout bounds a credential's from_command.
const credentialCommandTimeout = 30 * time.Second

// CredentialValue reads the value of credential c from its source, outside
// the sandbox: an environment variable of this process, a file, or a
// command's output (trailing white space trimmed). Errors name the
// credential and the source, never a value or a command's output.
func CredentialValue(ctx context.Context, c backend.Credential) (string, error) {
	src := c.From
	var v string
	switch {
	case src.Env != "":
		val, ok := os.LookupEnv(src.Env)
		if !ok {
			return "", fmt.Errorf("credential %s: $%s is not set in the environment of the process creating the sandbox", c.Name, src.Env)
		}
		v = val
	case src.File != "":
		data, err := os.ReadFile(src.File)
		if err != nil {
			return "", fmt.Errorf("credential %s: reading from_file: %w", c.Name, err)
		}
		v = string(data)
	case len(src.Command) > 0:
		ctx, cancel := context.WithTimeout(ctx, credentialCommandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, src.Command[0], src.Command[1:]...)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("it exited with %d", ee.ExitCode())
			}
			return "", fmt.Errorf("credential %s: from_command: %w", c.Name, err)
		}
		v = out.String()
	default:
		return "", fmt.Errorf("%w: credential %s has no source (from_env, from_file or from_command)", backend.ErrInvalidConfig, c.Name)
	}
	v = strings.TrimRight(v, " \t\r\n")
	if v == "" {
		return "", fmt.Errorf("credential %s: its source gave an empty value", c.Name)
	}
	return v, nil
}

// ForkCredentials makes, from parentFile (the enforcer's file of a
// sandbox), the credentials of its fork id: a CA of the fork's own and a
// new placeholder per credential, with the parent's values (the latest
// their sources gave). It returns them (Env: the CA bundle's variables),
// the parent's CA certificate, and the fork's placeholder for each of the
// parent's.
func ForkCredentials(id string, parentFile []byte) (br *Brokered, parentCA string, placeholders map[string]string, err error) {
	var file egressctl.Credentials
	if err := json.Unmarshal(parentFile, &file); err != nil {
		return nil, "", nil, fmt.Errorf("the parent's credentials file: %w", err)
	}
	ca, err := egress.NewCA(id)
	if err != nil {
		return nil, "", nil, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, "", nil, err
	}
	parentCA = file.CACert
	file.CACert, file.CAKey = string(ca.CertPEM()), string(key)
	placeholders = map[string]string{}
	for i, c := range file.Credentials {
		ph, err := egress.PlaceholderFor(c.Name)
		if err != nil {
			return nil, "", nil, err
		}
		if c.Placeholder != "" {
			placeholders[c.Placeholder] = ph
		}
		file.Credentials[i].Placeholder = ph
	}
	data, err := json.Marshal(file)
	if err != nil {
		return nil, "", nil, err
	}
	return &Brokered{Env: caEnv(), CAPEM: string(ca.CertPEM()), EnforcerFile: data}, parentCA, placeholders, nil
}

// ReplacePlaceholders returns env (KEY=VALUE entries) with each value that
// is a key of placeholders (a parent's) replaced by its value (a fork's).
func ReplacePlaceholders(env []string, placeholders map[string]string) []string {
	out := slices.Clone(env)
	for i, e := range out {
		k, v, _ := strings.Cut(e, "=")
		if ph, ok := placeholders[v]; ok {
			out[i] = k + "=" + ph
		}
	}
	return out
}

// caEnv are the variables that name the CA bundle for the usual clients.
func caEnv() map[string]string {
	return map[string]string{
		"SSL_CERT_FILE": SandboxCABundle, "REQUESTS_CA_BUNDLE": SandboxCABundle, "CURL_CA_BUNDLE": SandboxCABundle,
		"GIT_SSL_CAINFO": SandboxCABundle, "NODE_EXTRA_CA_CERTS": SandboxCAFile,
	}
}

// Brokered is what a backend needs to broker a sandbox's credentials (see
// backend.Credential): the variables the sandbox gets (placeholders, and
// the CA bundle's paths), the certificate of the sandbox's CA (public), and
// the enforcer's file (`sbxd egress --credentials`: the CA's key and the
// values), which must stay outside the sandbox, readable by root alone.
type Brokered struct {
	Env          map[string]string
	CAPEM        string
	EnforcerFile []byte
}

// Where the CA's certificate and the bundle of the image's trust store
// with it go in a sandbox.
const (
	SandboxCAFile   = "/etc/sandboxkit/credentials-ca.pem"
	SandboxCABundle = "/etc/sandboxkit/ca-bundle.pem"
)

// SystemBundles are the trust stores of common images, relative to the
// root: the first that exists gets the CA too.
var SystemBundles = []string{"etc/ssl/certs/ca-certificates.crt", "etc/pki/tls/certs/ca-bundle.crt", "etc/ssl/cert.pem"}

// PrepareCredentials reads the values of creds (CredentialValue), makes
// sandbox id's CA and a placeholder per credential.
func PrepareCredentials(ctx context.Context, id string, creds []backend.Credential) (*Brokered, error) {
	ca, err := egress.NewCA(id)
	if err != nil {
		return nil, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	file := egressctl.Credentials{CACert: string(ca.CertPEM()), CAKey: string(key)}
	env := caEnv()
	for _, c := range creds {
		v, err := CredentialValue(ctx, c)
		if err != nil {
			return nil, err
		}
		ph, err := egress.PlaceholderFor(c.Name)
		if err != nil {
			return nil, err
		}
		if c.Env != "" {
			env[c.Env] = ph
		}
		file.Credentials = append(file.Credentials, egressctl.CredentialSpec{Name: c.Name, Hosts: c.Hosts, Header: c.Header, Format: c.Format,
			Query: c.Query, BasicUser: c.BasicUser, Placeholder: ph, Value: v})
	}
	data, err := json.Marshal(file)
	if err != nil {
		return nil, err
	}
	return &Brokered{Env: env, CAPEM: string(ca.CertPEM()), EnforcerFile: data}, nil
}

// CAFiles are the files a sandbox gets for the CA caPEM, by path relative
// to its root, given its image's trust store system (nil: none) found at
// systemPath: the CA, a bundle of the trust store and the CA, and the
// trust store with the CA added.
func CAFiles(caPEM string, system []byte, systemPath string) map[string][]byte {
	bundle := append(append(slices.Clone(system), '\n'), caPEM...)
	files := map[string][]byte{SandboxCAFile[1:]: []byte(caPEM), SandboxCABundle[1:]: bundle}
	if systemPath != "" {
		files[systemPath] = bundle
	}
	return files
}

// WithoutCAs is the trust store system without the CAs replaced (each a
// PEM that CAFiles added, such as a forked sandbox's parent's).
func WithoutCAs(system []byte, replaced ...string) []byte {
	for _, old := range replaced {
		if old != "" {
			system = bytes.ReplaceAll(system, []byte("\n"+old), nil)
			system = bytes.ReplaceAll(system, []byte(old), nil)
		}
	}
	return system
}

// InstallCA writes CAFiles into the root file system at rootfs (through an
// os.Root: the image's symlinks cannot lead out); the CAs replaced (a
// fork's parent's) leave the trust store first.
func InstallCA(rootfs, caPEM string, replaced ...string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	var system []byte
	var systemPath string
	for _, p := range SystemBundles {
		data, err := root.ReadFile(p)
		if err == nil {
			system, systemPath = data, p
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for p, data := range CAFiles(caPEM, WithoutCAs(system, replaced...), systemPath) {
		if err := root.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := root.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// HostRoots is this host's trust store, for an enforcer that verifies the
// real servers in a container of another image: the file $SSL_CERT_FILE
// names, else the first of the usual ones (nil: none found).
func HostRoots() []byte {
	files := []string{os.Getenv("SSL_CERT_FILE")}
	for _, p := range SystemBundles {
		files = append(files, "/"+p)
	}
	for _, f := range files {
		if f == "" {
			continue
		}
		if data, err := os.ReadFile(f); err == nil && len(data) > 0 {
			return data
		}
	}
	return nil
}

// RotatedFile is an enforcer's file old (Brokered.EnforcerFile) with the
// values of creds read again from their sources; creds must be the
// credentials the file holds, by name (a sandbox cannot gain or lose one
// while it runs: its placeholders are in its environment). Errors name
// credentials, never values.
func RotatedFile(ctx context.Context, old []byte, creds []backend.Credential) ([]byte, error) {
	var file egressctl.Credentials
	if err := json.Unmarshal(old, &file); err != nil {
		return nil, fmt.Errorf("the enforcer's credentials file: %w", err)
	}
	byName := map[string]backend.Credential{}
	for _, c := range creds {
		byName[c.Name] = c
	}
	if len(byName) != len(file.Credentials) {
		return nil, fmt.Errorf("%w: the sandbox has %d credentials, %d given: give those it was made with", backend.ErrInvalidConfig, len(file.Credentials), len(byName))
	}
	for i, s := range file.Credentials {
		c, ok := byName[s.Name]
		if !ok {
			return nil, fmt.Errorf("%w: credential %s of the sandbox is not among those given", backend.ErrInvalidConfig, s.Name)
		}
		v, err := CredentialValue(ctx, c)
		if err != nil {
			return nil, err
		}
		file.Credentials[i].Value = v
	}
	return json.Marshal(file)
}
