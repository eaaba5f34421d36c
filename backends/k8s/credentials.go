package k8s

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
)

// Brokered credentials (backend.Credential) on k8s: the pod is made with
// placeholders in the sandbox's environment and the bundle's variables
// naming files of the sbx volume (the sandbox may run as any user, so the
// image's own trust store is not rewritten); once it runs, Create writes
// the CA and the bundle there (through the sandbox's container, reading
// its image's trust store), then this host's trust store and the
// enforcer's file into the enforcer's state volume, which only the sidecar
// mounts (through the sidecar, as root, mode 0600). The sidecar starts the
// enforcer once that file is there; the sandbox's command waits for the
// enforcer, so it never runs without the CA.

// Paths in the pod.
const (
	podCAFile         = sbxdDir + "/credentials-ca.pem"
	podCABundle       = sbxdDir + "/ca-bundle.pem"
	egressCredentials = egressState + "/credentials.json"
	egressRoots       = egressState + "/roots.pem"
)

// podCredentialEnv is br's environment with the bundle's variables moved to
// the sbx volume.
func podCredentialEnv(br *backendkit.Brokered) map[string]string {
	env := map[string]string{}
	for k, v := range br.Env {
		switch v {
		case backendkit.SandboxCABundle:
			v = podCABundle
		case backendkit.SandboxCAFile:
			v = podCAFile
		}
		env[k] = v
	}
	return env
}

// credentialWriteScript writes stdin to file (mode, through a temporary file).
func credentialWriteScript(file, mode string) []string {
	return []string{"/bin/sh", "-c", `umask 077 && cat > "$1.tmp" && chmod ` + mode + ` "$1.tmp" && mv -f "$1.tmp" "$1"`, "sh", file}
}

// deliverCredentials puts br's files in the running pod of s (see above).
func (s *Sandbox) deliverCredentials(ctx context.Context, br *backendkit.Brokered) error {
	var system []byte
	for _, p := range backendkit.SystemBundles {
		var out bytes.Buffer
		if code, err := s.b.stream(ctx, s.pod, containerName, []string{"cat", "/" + p}, nil, &out, nil); err == nil && code == 0 {
			system = out.Bytes()
			break
		}
	}
	files := backendkit.CAFiles(br.CAPEM, system, "")
	for p, data := range map[string][]byte{podCAFile: files[backendkit.SandboxCAFile[1:]], podCABundle: files[backendkit.SandboxCABundle[1:]]} {
		var stderr bytes.Buffer
		code, err := s.b.stream(ctx, s.pod, containerName, credentialWriteScript(p, "644"), bytes.NewReader(data), nil, &stderr)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.String()))
		}
		if err != nil {
			return fmt.Errorf("installing the credential broker's CA: %w", err)
		}
	}
	deliveries := []struct {
		file, mode string
		data       []byte
	}{{egressCredentials, "600", br.EnforcerFile}}
	if roots := backendkit.HostRoots(); roots != nil {
		// First: the enforcer starts once the credentials are there.
		deliveries = append([]struct {
			file, mode string
			data       []byte
		}{{egressRoots, "644", roots}}, deliveries...)
	}
	for _, d := range deliveries {
		var stderr bytes.Buffer
		code, err := s.b.stream(ctx, s.pod, egressContainer, credentialWriteScript(d.file, d.mode), bytes.NewReader(d.data), nil, &stderr)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.String()))
		}
		if err != nil {
			return fmt.Errorf("egress enforcer: its credentials: %w", err)
		}
	}
	return nil
}

var _ backend.CredentialRotator = (*Backend)(nil)

// RotateCredentials reads sandbox id's credentials' values again and hands
// them to its enforcer: its file is rewritten in the sidecar and the
// enforcer (the sidecar's first process) told to read it (SIGHUP; it keeps
// the previous values if the new file is bad).
func (b *Backend) RotateCredentials(ctx context.Context, id string, creds []backend.Credential) error {
	const op = "rotate credentials"
	if err := b.checkEnforcer(ctx, op, id); err != nil {
		return err
	}
	run := b.runInSidecar(id)
	old, _, code, err := run(ctx, []string{"cat", egressCredentials}, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("%w: the sandbox was made without credentials (its enforcer has no file)", backend.ErrInvalidConfig)
	}
	if err != nil {
		return b.opErr(op, id, err)
	}
	data, err := backendkit.RotatedFile(ctx, old, creds)
	if err != nil {
		return b.opErr(op, id, err)
	}
	for _, argv := range [][]string{credentialWriteScript(egressCredentials, "600"), {"kill", "-HUP", "1"}} {
		var in []byte
		if argv[0] != "kill" {
			in = data
		}
		_, stderr, code, err := run(ctx, argv, in)
		if err == nil && code != 0 {
			err = fmt.Errorf("%s: exit %d: %s", argv[0], code, strings.TrimSpace(string(stderr)))
		}
		if err != nil {
			return b.opErr(op, id, err)
		}
	}
	return nil
}
