package native

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
)

// Brokered credentials (backend.Credential) on native: the enforcer's file
// (the CA's key and the values) is copied into the enforcer's container
// alone, which reads it at start; the real servers are verified against
// this host's trust store, copied there too; the sandbox's container gets
// the CA in its image's trust store and the bundle the usual variables
// name (backendkit.PrepareCredentials, CAFiles).

// Paths in the enforcer's container.
const (
	egressCredentials = egressState + "-credentials.json"
	egressRoots       = egressState + "-roots.pem"
)

// brokerEnforcer makes the enforcer of ecfg read br's credentials, and
// returns the files to copy into its container before it starts.
func brokerEnforcer(ecfg *container.Config, br *backendkit.Brokered) map[string]fileInTar {
	files := map[string]fileInTar{egressCredentials: {data: br.EnforcerFile, mode: 0o600}}
	ecfg.Entrypoint = slices.Concat(ecfg.Entrypoint, []string{"--credentials", egressCredentials})
	if roots := backendkit.HostRoots(); roots != nil {
		files[egressRoots] = fileInTar{data: roots, mode: 0o644}
		ecfg.Env = append(ecfg.Env, "SSL_CERT_FILE="+egressRoots)
	}
	return files
}

// fileInTar is a file for filesTar.
type fileInTar struct {
	data []byte
	mode int64
}

// filesTar is a tar of files by absolute path (their folders made
// 0755), owned by root, for CopyToContainer at "/".
func filesTar(files map[string]fileInTar) io.Reader {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		rel := strings.TrimPrefix(p, "/")
		for d := path.Dir(rel); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)})
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		f := files[p]
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)})
		tw.Write(f.data)
	}
	tw.Close()
	return &buf
}

// installCA puts the CA caPEM into container cid (created, not started):
// its image's trust store (read from the container), the CA and the
// bundle. The CAs replaced (a fork's parent's) leave the trust store.
func (b *Backend) installCA(ctx context.Context, cid, caPEM string, replaced ...string) error {
	var system []byte
	var systemPath string
	for _, p := range backendkit.SystemBundles {
		data, err := b.readContainerFile(ctx, cid, "/"+p)
		if err == nil {
			system, systemPath = data, p
			break
		}
	}
	files := map[string]fileInTar{}
	for p, data := range backendkit.CAFiles(caPEM, backendkit.WithoutCAs(system, replaced...), systemPath) {
		files["/"+p] = fileInTar{data: data, mode: 0o644}
	}
	if err := b.cli.CopyToContainer(ctx, cid, "/", filesTar(files), container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("installing the credential broker's CA: %w", b.translate(err))
	}
	return nil
}

// readContainerFile reads the regular file p of container cid.
func (b *Backend) readContainerFile(ctx context.Context, cid, p string) ([]byte, error) {
	rc, _, err := b.cli.CopyFromContainer(ctx, cid, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		return nil, err
	}
	if h.Typeflag != tar.TypeReg {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(tr, 16<<20))
}

var _ backend.CredentialRotator = (*Backend)(nil)

// RotateCredentials reads sandbox id's credentials' values again and hands
// them to its enforcer: its file is rewritten in its container and it is
// told to read it (SIGHUP; it keeps the previous values if the new file is
// bad).
func (b *Backend) RotateCredentials(ctx context.Context, id string, creds []backend.Credential) error {
	ecid, err := b.enforcerOf(ctx, "rotate credentials", id)
	if err != nil {
		return err
	}
	old, err := b.readContainerFile(ctx, ecid, egressCredentials)
	if err != nil {
		return b.opErr("rotate credentials", id, fmt.Errorf("%w: the sandbox was made without credentials (its enforcer has no file: %v)", backend.ErrInvalidConfig, err))
	}
	data, err := backendkit.RotatedFile(ctx, old, creds)
	if err != nil {
		return b.opErr("rotate credentials", id, err)
	}
	if err := b.cli.CopyToContainer(ctx, ecid, "/", filesTar(map[string]fileInTar{egressCredentials: {data: data, mode: 0o600}}), container.CopyToContainerOptions{}); err != nil {
		return b.opErr("rotate credentials", id, b.translate(err))
	}
	if err := b.cli.ContainerKill(ctx, ecid, "HUP"); err != nil {
		return b.opErr("rotate credentials", id, b.translate(err))
	}
	return nil
}
