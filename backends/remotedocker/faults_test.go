package remotedocker_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
)

// lines collects what a command streams, announcing each write.
type lines struct{ got chan string }

func (l *lines) Write(p []byte) (int, error) {
	select {
	case l.got <- string(p):
	default:
	}
	return len(p), nil
}

// The SSH connection is cut while a command runs: Exec fails promptly with
// an error wrapping ErrUnavailable (not a silent short result), and the
// next call connects again.
func TestConnectionCutMidExec(t *testing.T) {
	h := remotetest.Get(t)
	proxy := remotetest.NewProxy(t, h.Addr+":"+strconv.Itoa(h.SSHPort))
	cfg := config(h)
	cfg.Host = "ssh://" + h.User + "@" + proxy.Addr
	known := filepath.Join(t.TempDir(), "known_hosts")
	writeKnownHosts(t, known, proxy.Addr, readPub(t, h.HostKey(t, "ed25519")))
	cfg.KnownHosts = known
	b := open(t, cfg)
	sb := create(t, b, spec("cut", dockertest.BusyboxImage))

	out := &lines{got: make(chan string, 1)}
	done := make(chan error, 1)
	var res backend.ExecResult
	go func() {
		var err error
		res, err = sb.Exec(t.Context(), backend.ExecRequest{Shell: "echo started; sleep 30; echo finished", Stdout: out})
		done <- err
	}()
	select {
	case <-out.got:
	case err := <-done:
		t.Fatalf("Exec ended before the cut: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the command did not start")
	}
	cutAt := time.Now()
	require.Positive(t, proxy.Cut())
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Exec still running 20s after its connection was cut")
	}
	t.Logf("Exec failed %v after the cut: %v", time.Since(cutAt).Round(time.Millisecond), err)
	require.Error(t, err)
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	_, isDrop := errors.AsType[*remotedocker.DroppedError](err)
	assert.True(t, isDrop, "want a *remotedocker.DroppedError, got %T", err)
	assert.Contains(t, err.Error(), "dropped")
	assert.Contains(t, err.Error(), "remotedocker")
	assert.NotContains(t, string(res.Stdout), "finished")

	// The next call reconnects.
	again, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"echo", "again"}})
	require.NoError(t, err)
	assert.Equal(t, "again\n", string(again.Stdout))
}

// The link dies silently (no reset): keepalives notice within
// ServerAliveInterval * ServerAliveCountMax and fail the call.
func TestSilentLinkDeath(t *testing.T) {
	h := remotetest.Get(t)
	proxy := remotetest.NewProxy(t, h.Addr+":"+strconv.Itoa(h.SSHPort))
	dir := t.TempDir()
	known := filepath.Join(dir, "known_hosts")
	writeKnownHosts(t, known, proxy.Addr, readPub(t, h.HostKey(t, "ed25519")))
	host, port, _ := net.SplitHostPort(proxy.Addr)
	sshConfig := filepath.Join(dir, "ssh_config")
	require.NoError(t, os.WriteFile(sshConfig, []byte(
		"Host flaky\n\tHostName "+host+"\n\tPort "+port+"\n\tUser "+h.User+"\n\tIdentityFile "+h.Key+
			"\n\tUserKnownHostsFile "+known+"\n\tServerAliveInterval 1\n\tServerAliveCountMax 2\n"), 0o600))
	b := open(t, remotedocker.Config{Host: "ssh://flaky", SSHConfig: sshConfig, RemoteSocket: h.DockerSocket, PullPolicy: "never"})
	sb := create(t, b, spec("silent", dockertest.BusyboxImage))

	out := &lines{got: make(chan string, 1)}
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: "echo started; sleep 60", Stdout: out})
		done <- err
	}()
	<-out.got
	proxy.Freeze()
	start := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Exec still running 30s after the link died")
	}
	t.Logf("Exec failed %v after the link died: %v", time.Since(start).Round(time.Millisecond), err)
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	assert.Contains(t, err.Error(), "keepalive")

	// The link is back: the next call connects again.
	proxy.Thaw()
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"echo", "back"}})
	require.NoError(t, err)
	assert.Equal(t, "back\n", string(res.Stdout))
}

// sshd goes away: calls fail with ErrUnavailable saying sshd cannot be
// reached; when it is back, calls work again.
func TestSSHDStopped(t *testing.T) {
	h := remotetest.Get(t)
	const port = 2222
	sshd := h.StartSSHD(t, port)
	cfg := config(h)
	cfg.Host = "ssh://" + h.User + "@" + h.Addr + ":" + strconv.Itoa(port)
	known := filepath.Join(t.TempDir(), "known_hosts")
	writeKnownHosts(t, known, h.Addr+":"+strconv.Itoa(port), readPub(t, h.HostKey(t, "ed25519")))
	cfg.KnownHosts = known
	b := open(t, cfg)
	ctx := t.Context()
	_, err := b.List(ctx, backend.Filter{})
	require.NoError(t, err)

	sshd.Stop()
	_, err = b.List(ctx, backend.Filter{})
	require.Error(t, err)
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	msg := err.Error()
	t.Log(msg)
	assert.Contains(t, msg, "cannot reach sshd at "+h.Addr+":2222")
	assert.Contains(t, msg, "refused")
	assert.NotContains(t, msg, "Cannot connect to the Docker daemon", "the Docker client's generic message hides the SSH failure")

	h.StartSSHD(t, port)
	_, err = b.List(ctx, backend.Filter{})
	assert.NoError(t, err, "no reconnect after sshd came back")
}

// A host key that is not the one known_hosts has is refused, naming the
// offered key's fingerprint and the fix; an unknown host likewise.
func TestHostKeyRefused(t *testing.T) {
	h := remotetest.Get(t)
	real := readPub(t, h.HostKey(t, "ed25519"))
	fp := ssh.FingerprintSHA256(real)
	dir := t.TempDir()

	t.Run("changed", func(t *testing.T) {
		known := filepath.Join(dir, "changed")
		writeKnownHosts(t, known, h.Addr, otherKey(t))
		cfg := config(h)
		cfg.KnownHosts = known
		_, err := open(t, cfg).List(t.Context(), backend.Filter{})
		require.Error(t, err)
		t.Log(err)
		he, ok := errors.AsType[*remotedocker.HostKeyError](err)
		require.True(t, ok, "want a *remotedocker.HostKeyError, got %v", err)
		assert.Equal(t, fp, he.Fingerprint)
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
		msg := err.Error()
		assert.Contains(t, msg, "CHANGED")
		assert.Contains(t, msg, fp)
		assert.Contains(t, msg, "ssh-keygen -R "+h.Addr+" -f "+known)
		assert.Contains(t, msg, knownhosts.Line([]string{h.Addr}, real))
	})
	t.Run("unknown", func(t *testing.T) {
		known := filepath.Join(dir, "empty")
		require.NoError(t, os.WriteFile(known, nil, 0o600))
		cfg := config(h)
		cfg.KnownHosts = known
		_, err := open(t, cfg).List(t.Context(), backend.Filter{})
		require.Error(t, err)
		t.Log(err)
		he, ok := errors.AsType[*remotedocker.HostKeyError](err)
		require.True(t, ok, "want a *remotedocker.HostKeyError, got %v", err)
		assert.Empty(t, he.Known)
		msg := err.Error()
		assert.Contains(t, msg, "not known")
		assert.Contains(t, msg, fp)
		assert.Contains(t, msg, knownhosts.Line([]string{h.Addr}, real))
		assert.Contains(t, msg, "ssh-keyscan -p 22 -t ed25519 "+h.Addr)
		assert.Contains(t, msg, "insecure_ignore_host_key")

		// The loudly named option accepts it.
		cfg.InsecureIgnoreHostKey = true
		_, err = open(t, cfg).List(t.Context(), backend.Filter{})
		assert.NoError(t, err)
	})
	t.Run("other key type known", func(t *testing.T) {
		// known_hosts has only the host's ECDSA key: the client must ask
		// for that type, not take the ed25519 one for a changed key.
		known := filepath.Join(dir, "ecdsa")
		writeKnownHosts(t, known, h.Addr, readPub(t, h.HostKey(t, "ecdsa")))
		cfg := config(h)
		cfg.KnownHosts = known
		_, err := open(t, cfg).List(t.Context(), backend.Filter{})
		assert.NoError(t, err)
	})
}

// A remote whose Docker socket is not there: a clear error naming the
// socket and the fix.
func TestNoDockerSocket(t *testing.T) {
	h := remotetest.Get(t)
	cfg := config(h)
	cfg.RemoteSocket = filepath.Join(filepath.Dir(h.DockerSocket), "no-docker-here.sock")
	b := open(t, cfg)
	_, err := b.Create(t.Context(), spec("nosock", dockertest.BusyboxImage))
	require.Error(t, err)
	t.Log(err)
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	assert.Contains(t, err.Error(), "could not open the Docker socket "+cfg.RemoteSocket)
	assert.Contains(t, err.Error(), "remote_socket")
}

// A key the server does not accept: the message names what was tried.
func TestLoginRefused(t *testing.T) {
	h := remotetest.Get(t)
	cfg := config(h)
	cfg.IdentityFile = writeKey(t)
	t.Setenv("SSH_AUTH_SOCK", "")
	_, err := open(t, cfg).List(t.Context(), backend.Filter{})
	require.Error(t, err)
	t.Log(err)
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "did not accept any key for user root")
	assert.Contains(t, err.Error(), cfg.IdentityFile)
}

// Authentication through ssh-agent (SSH_AUTH_SOCK) with no identity file,
// and ~/.ssh/config's aliases with ProxyJump.
func TestAgentAndSSHConfig(t *testing.T) {
	h := remotetest.Get(t)
	for _, tool := range []string{"ssh-agent", "ssh-add"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	require.NoError(t, agent.Start())
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	waitFor(t, func() bool { _, err := os.Stat(sock); return err == nil })
	add := exec.Command("ssh-add", h.Key)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	out, err := add.CombinedOutput()
	require.NoError(t, err, "%s", out)

	t.Setenv("SSH_AUTH_SOCK", sock)
	t.Setenv("HOME", dir) // no ~/.ssh: the agent's key is the only one

	cfg := config(h)
	cfg.IdentityFile = ""
	_, err = open(t, cfg).List(t.Context(), backend.Filter{})
	require.NoError(t, err, "login with the agent's key")

	// The defaults a user has: ~/.ssh/config names the host, ~/.ssh/known_hosts
	// has its key, ~/.ssh/id_ed25519 is the key (the agent is off).
	t.Run("home defaults", func(t *testing.T) {
		t.Setenv("SSH_AUTH_SOCK", "")
		sshDir := filepath.Join(dir, ".ssh")
		require.NoError(t, os.MkdirAll(sshDir, 0o700))
		key, err := os.ReadFile(h.Key)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(sshDir, "id_ed25519"), key, 0o600))
		writeKnownHosts(t, filepath.Join(sshDir, "known_hosts"), h.Addr, readPub(t, h.HostKey(t, "ed25519")))
		require.NoError(t, os.WriteFile(filepath.Join(sshDir, "config"),
			[]byte("Host gpu-box\n\tHostName "+h.Addr+"\n\tUser "+h.User+"\n"), 0o600))
		b := open(t, remotedocker.Config{Host: "ssh://gpu-box", RemoteSocket: h.DockerSocket})
		_, err = b.List(t.Context(), backend.Filter{})
		require.NoError(t, err)
		assert.Equal(t, h.Addr, b.RemoteHost(), "docker_remote_host defaults to the HostName")
	})

	// The harness's ssh config: an alias with HostName, User, Port,
	// IdentityFile and UserKnownHostsFile, and one reached by ProxyJump.
	for _, alias := range []string{"sbx-remote", "sbx-remote-jumped"} {
		t.Run(alias, func(t *testing.T) {
			b := open(t, remotedocker.Config{Host: "ssh://" + alias, SSHConfig: h.SSHConfig,
				RemoteSocket: h.DockerSocket, PullPolicy: "never"})
			sb := create(t, b, spec("alias", dockertest.BusyboxImage))
			res, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"echo", alias}})
			require.NoError(t, err)
			assert.Equal(t, alias+"\n", string(res.Stdout))
		})
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readPub(t *testing.T, path string) ssh.PublicKey {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	k, _, _, _, err := ssh.ParseAuthorizedKey(data)
	require.NoError(t, err)
	return k
}

func writeKnownHosts(t *testing.T, path, addr string, key ssh.PublicKey) {
	t.Helper()
	line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, key)
	require.NoError(t, os.WriteFile(path, []byte(line+"\n"), 0o600))
}

// otherKey is an ed25519 key no server has.
func otherKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	k, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	return k
}

// writeKey writes a new private key no server authorizes.
func writeKey(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "id_other")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(block), 0o600))
	return path
}
