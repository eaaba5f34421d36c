package egresstest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// MustRestoreWithoutSecrets proves what a bundle or a move of e's sandbox
// (made with spec, whose credentials bring value) carries: it snapshots
// the sandbox, saves the snapshot as the image archive a bundle holds, and
// requires the archive to hold neither value nor any of secrets (such as
// the CA's private key) nor a private key at all; then, as a restore does,
// it loads the archive and creates a sandbox of spec from it, which must
// get a placeholder and a CA of its own and have value applied again from
// its source. It returns the new sandbox's Env.
func (e *Env) MustRestoreWithoutSecrets(t *testing.T, b backend.Backend, spec backend.Spec, value string, secrets ...string) *Env {
	t.Helper()
	ctx := t.Context()
	sn, ok := backend.As[backend.Snapshotter](e.Sandbox)
	require.True(t, ok, "the sandbox takes no snapshots")
	arch, ok := backend.AsBackend[backend.ImageArchiver](b)
	require.True(t, ok, "the backend saves no images")
	snap, err := sn.Snapshot(ctx, backend.SnapshotRequest{Ref: "sandboxkit-test/credentials:" + strings.ToLower(e.Sandbox.ID()), Labels: map[string]string{backend.LabelTransient: "1"}})
	require.NoError(t, err)
	if m, ok := backend.AsBackend[backend.SnapshotManager](b); ok {
		t.Cleanup(func() { m.RemoveSnapshot(context.Background(), snap.Ref) })
	}
	f, err := os.CreateTemp("", "sbx-credentials-archive-*.tar")
	require.NoError(t, err)
	t.Cleanup(func() { f.Close(); os.Remove(f.Name()) })
	require.NoError(t, arch.SaveImages(ctx, f, []string{snap.Ref}))
	_, err = f.Seek(0, io.SeekStart)
	require.NoError(t, err)
	// The control: the CA's certificate (public), which the sandbox's
	// files hold, so that a scan that reads nothing cannot pass.
	before := placeholderAndCA(t, e.Sandbox)
	_, caPEM, _ := strings.Cut(before, "\n")
	caLines := strings.Split(caPEM, "\n")
	require.Greater(t, len(caLines), 2, "no CA in the sandbox: %q", before)
	control := caLines[1]
	needles := append([]string{control, value, "PRIVATE KEY-----"}, secrets...)
	found, err := archiveHolds(bufio.NewReader(f), needles)
	require.NoError(t, err)
	require.Contains(t, found, control, "the scan did not find the CA certificate the snapshot holds: it reads nothing")
	require.Equal(t, []string{control}, found, "the sandbox's image archive (what a bundle carries) holds secrets")

	_, err = f.Seek(0, io.SeekStart)
	require.NoError(t, err)
	loaded, err := arch.LoadImages(ctx, f)
	require.NoError(t, err)
	require.Len(t, loaded, 1)
	restored := spec
	for _, ref := range loaded {
		restored.Image = ref
	}
	restored.Name = spec.Name + "-restored"
	sb2, err := b.Create(ctx, restored)
	require.NoError(t, err)
	t.Cleanup(func() { sb2.Destroy(context.Background()) })
	e2 := NewEnv(t, e.Net, e.Ctl, sb2)
	e2.MustBroker(t, value)
	after := placeholderAndCA(t, sb2)
	require.True(t, strings.HasPrefix(after, "sbx-placeholder-"), "the restored sandbox has no placeholder: %.60q", after)
	oldPH, oldCA, _ := strings.Cut(before, "\n")
	newPH, newCA, _ := strings.Cut(after, "\n")
	require.NotEqual(t, oldPH, newPH, "the restored sandbox kept the original's placeholder")
	require.NotEqual(t, oldCA, newCA, "the restored sandbox kept the original's CA")
	return e2
}

// archiveHolds returns those of needles found in the archive r: in its
// members' bytes (a layer archive's files are in its bytes as they are),
// a gzipped member's uncompressed.
func archiveHolds(r io.Reader, needles []string) ([]string, error) {
	found := map[string]bool{}
	if err := scanArchive(r, needles, found); err != nil {
		return nil, err
	}
	var out []string
	for _, n := range needles {
		if found[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

func scanArchive(r io.Reader, needles []string, found map[string]bool) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
			if zr, err := gzip.NewReader(bytes.NewReader(data)); err == nil {
				if plain, err := io.ReadAll(zr); err == nil {
					data = plain
				}
			}
		}
		for _, n := range needles {
			if bytes.Contains(data, []byte(n)) {
				found[n] = true
			}
		}
	}
}

// placeholderAndCA returns sb's $API_KEY and, after a newline, its CA.
func placeholderAndCA(t *testing.T, sb backend.Sandbox) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: `echo "$API_KEY"; cat /etc/sandboxkit/credentials-ca.pem`})
	require.NoError(t, err)
	return string(res.Stdout)
}

// MustForkWithOwnCredentials forks e's sandbox (n forks, made with a
// policy that allows allowed.test and, for credentials, value in X-Api-Key)
// and requires each fork to keep the policy on a network of its own
// (allowed.test reachable, denied.test not) and to have a placeholder and
// CA of its own, through which its requests carry value again; the
// parent's CA is in none of a fork's CA files. It returns the forks' Envs.
func (e *Env) MustForkWithOwnCredentials(t *testing.T, n int, value string) []*Env {
	t.Helper()
	fk, ok := backend.As[backend.Forker](e.Sandbox)
	require.True(t, ok, "the sandbox makes no forks")
	forks, err := fk.Fork(t.Context(), backend.ForkRequest{N: n})
	require.NoError(t, err)
	for _, f := range forks {
		t.Cleanup(func() { f.Destroy(context.Background()) })
	}
	parent := placeholderAndCA(t, e.Sandbox)
	parentPH, parentCA, _ := strings.Cut(parent, "\n")
	caLine := strings.Split(parentCA, "\n")[1]
	seen := map[string]bool{parentPH: true}
	var envs []*Env
	for _, f := range forks {
		fe := NewEnv(t, e.Net, e.Ctl, f)
		fe.MustBroker(t, value)
		fe.MustFail(t, "get", "http://denied.test/")
		own := placeholderAndCA(t, f)
		ph, _, _ := strings.Cut(own, "\n")
		require.True(t, strings.HasPrefix(ph, "sbx-placeholder-"), "the fork has no placeholder: %.60q", own)
		require.False(t, seen[ph], "a fork shares a placeholder: %s", ph)
		seen[ph] = true
		res, err := f.Exec(t.Context(), backend.ExecRequest{Shell: "cat /etc/sandboxkit/* /etc/ssl/certs/ca-certificates.crt 2>/dev/null; true"})
		require.NoError(t, err)
		require.NotContains(t, string(res.Stdout), caLine, "a fork still trusts its parent's CA")
		st, err := e.Ctl.EgressStatus(t.Context(), f.ID())
		require.NoError(t, err)
		require.Equal(t, []string{"allowed.test"}, st.Policy.Allow, "the fork's policy")
		envs = append(envs, fe)
	}
	// The parent's own broker still works, with its placeholder.
	e.MustBroker(t, value)
	return envs
}
