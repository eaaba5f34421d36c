package remotedocker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

func TestParseHost(t *testing.T) {
	for _, c := range []struct {
		in   string
		want endpoint
		err  string
	}{
		{in: "ssh://gpu-box", want: endpoint{scheme: "ssh", host: "gpu-box"}},
		{in: "ssh://me@gpu-box:2222", want: endpoint{scheme: "ssh", user: "me", host: "gpu-box", port: 2222}},
		{in: "ssh://me@[fd00::5]:22", want: endpoint{scheme: "ssh", user: "me", host: "fd00::5", port: 22}},
		{in: "tcp://10.0.0.5:2376", want: endpoint{scheme: "tcp", host: "10.0.0.5", port: 2376}},
		{in: "ssh://me:secret@gpu-box", err: "passwords are not supported"},
		{in: "ssh://gpu-box/var/run/docker.sock", err: "set remote_socket"},
		{in: "unix:///var/run/docker.sock", err: "use the native backend"},
		{in: "http://gpu-box", err: `unsupported scheme "http"`},
		{in: "gpu-box", err: "want"},
		{in: "ssh://gpu-box:99999", err: "bad port"},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := parseHost(c.in)
			if c.err != "" {
				require.ErrorIs(t, err, backend.ErrInvalidConfig)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			c.want.raw = c.in
			assert.Equal(t, c.want, got)
		})
	}
}

func TestParseHostFromEnvironment(t *testing.T) {
	t.Setenv("DOCKER_HOST", "ssh://ci@builder")
	got, err := parseHost("")
	require.NoError(t, err)
	assert.Equal(t, "builder", got.host)
	t.Setenv("DOCKER_HOST", "")
	_, err = parseHost("")
	assert.ErrorContains(t, err, "docker_host is not set")
}

func TestValidate(t *testing.T) {
	assert.NoError(t, Config{Ports: PortsTunnel, RemoteSocket: "/run/docker.sock"}.validate())
	assert.ErrorContains(t, Config{Ports: "dynamic"}.validate(), `ports "dynamic"`)
	assert.ErrorContains(t, Config{RemoteSocket: "docker.sock"}.validate(), "absolute")
	assert.ErrorContains(t, Config{PullPolicy: "sometimes"}.validate(), "[sandbox.remotedocker] pull_policy")
	assert.ErrorContains(t, Config{EgressSpares: 17}.validate(), "[sandbox.remotedocker] egress_spares = 17: want 0 (none) to 16")
	assert.ErrorContains(t, Config{EgressDNS: "not an address"}.validate(), "[sandbox.remotedocker] egress_dns")
	assert.NoError(t, Config{EgressSpares: 2}.validate())
	assert.Equal(t, 2, Config{EgressSpares: 2}.nativeConfig("unix:///x").EgressSpares)
}

const testSSHConfig = `
Host gpu
	HostName 10.1.2.3
	User alice
	Port 2200
	IdentityFile ~/.ssh/gpu_key
	IdentityFile %d/.ssh/%r_at_%h
	IdentitiesOnly yes
	ProxyJump bob@bastion:2022,inner
	ServerAliveInterval 5
	ServerAliveCountMax 4
	ConnectTimeout 7
	UserKnownHostsFile ~/.ssh/kh1 ~/.ssh/kh2
	HostKeyAlias gpu-alias

Host bastion
	HostName bastion.example
	IdentityFile ~/.ssh/bastion_key

Host inner
	HostName 192.168.9.9
	User carol

Host loop1
	ProxyJump loop2
Host loop2
	ProxyJump loop1

Host cmd
	ProxyCommand nc %h %p
`

func TestResolveTarget(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	path := filepath.Join(home, "config")
	require.NoError(t, os.WriteFile(path, []byte(testSSHConfig), 0o600))
	s, err := loadSSHSettings(path)
	require.NoError(t, err)

	tg, err := resolveTarget(s, "gpu", "", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, "10.1.2.3", tg.host)
	assert.Equal(t, "alice", tg.user)
	assert.Equal(t, 2200, tg.port)
	assert.Equal(t, []string{home + "/.ssh/gpu_key", home + "/.ssh/alice_at_10.1.2.3"}, tg.identityFiles)
	assert.True(t, tg.identitiesOnly)
	assert.Equal(t, 5*time.Second, tg.aliveInterval)
	assert.Equal(t, 4, tg.aliveCountMax)
	assert.Equal(t, 7*time.Second, tg.connectTimeout)
	assert.Equal(t, []string{home + "/.ssh/kh1", home + "/.ssh/kh2"}, tg.knownHosts)
	assert.Equal(t, "gpu-alias:22", knownAddr(tg))
	require.Len(t, tg.jumps, 2)
	assert.Equal(t, "bob@bastion.example:2022", tg.jumps[0].user+"@"+tg.jumps[0].addr())
	assert.Equal(t, []string{home + "/.ssh/bastion_key"}, tg.jumps[0].identityFiles)
	assert.Equal(t, "carol@192.168.9.9:22", tg.jumps[1].user+"@"+tg.jumps[1].addr())
	assert.Contains(t, tg.String(), "via bob@bastion.example:2022, carol@192.168.9.9:22")

	// What docker_host writes wins over the config.
	tg, err = resolveTarget(s, "gpu", "root", 22, 0)
	require.NoError(t, err)
	assert.Equal(t, "root@10.1.2.3:22", tg.user+"@"+tg.addr())

	// A host the config does not name: defaults.
	tg, err = resolveTarget(s, "plain.example", "", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, "plain.example:22", tg.addr())
	assert.Equal(t, localUser(), tg.user)
	assert.True(t, tg.defaultIDs)
	assert.Equal(t, defaultAliveInterval, tg.aliveInterval)

	_, err = resolveTarget(s, "loop1", "", 0, 0)
	assert.ErrorContains(t, err, "loop")
	_, err = resolveTarget(s, "cmd", "", 0, 0)
	assert.ErrorContains(t, err, "ProxyCommand")

	none, err := loadSSHSettings("none")
	require.NoError(t, err)
	tg, err = resolveTarget(none, "gpu", "", 0, 0)
	require.NoError(t, err)
	assert.Equal(t, "gpu", tg.host)

	_, err = loadSSHSettings(filepath.Join(home, "missing"))
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
}

func TestSplitUserHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"host":            "|host|0",
		"u@host":          "u|host|0",
		"u@host:2022":     "u|host:2022",
		"[fd00::1]:2200":  "|fd00::1:2200",
		"me@[fd00::1]":    "me|fd00::1|0",
		"user@with@at:22": "user@with|at:22",
	} {
		u, h, p, err := splitUserHostPort(in)
		require.NoError(t, err, in)
		got := u + "|" + h
		if p != 0 {
			got += fmt.Sprintf(":%d", p)
		} else {
			got += "|0"
		}
		assert.Equal(t, want, got, in)
	}
	_, _, _, err := splitUserHostPort("h:notaport")
	assert.Error(t, err)
}

// The Docker client replaces errors mentioning "connection refused" or
// "dial unix" with its own "Cannot connect to the Docker daemon" message.
func TestDescribeDialErrAvoidsDockerRewrites(t *testing.T) {
	for _, err := range []error{
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)},
		errors.New("dial unix /x: connection refused"),
	} {
		msg := describeDialErr(err)
		assert.NotContains(t, msg, "connection refused")
		assert.NotContains(t, msg, "dial unix")
	}
	assert.Contains(t, describeDialErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), "refused")
}

func TestDroppedError(t *testing.T) {
	err := error(&DroppedError{Target: "me@gpu:22", Cause: errors.New("read: connection reset by peer")})
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	assert.Contains(t, err.Error(), "me@gpu:22")
	assert.Contains(t, err.Error(), "reconnects")
}
