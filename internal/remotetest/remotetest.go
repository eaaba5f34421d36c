// Package remotetest gives the remotedocker tests their "remote host": a
// network namespace with its own address, a second dockerd and sshd, made by
// scripts/remote-harness.sh. Host starts it when it is not up and skips the
// test when that cannot work here (not root, no ip or sshd), or fails it
// when SBX_REQUIRE_REMOTE=1 (as in CI).
//
// It also has the pieces the fault tests need: an extra sshd the test can
// stop, a TCP proxy whose connections the test can cut, and a client for
// the remote daemon's socket to check what landed where.
package remotetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/internal/harness"
)

// EnvRequire makes the remotedocker tests fail instead of skipping when the
// harness cannot be made (CI sets it).
const EnvRequire = "SBX_REQUIRE_REMOTE"

// EnvFile overrides where the harness's environment file is read.
const EnvFile = "SBX_REMOTE_ENV"

const defaultEnvFile = "/run/sandboxkit-remote/env"

// Required reports whether SBX_REQUIRE_REMOTE asks for the harness.
func Required() bool { return harness.Required(EnvRequire) }

func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	harness.Unavailable(t, EnvRequire, format, args...)
}

// Host is the harness's remote host, as its environment file describes it.
type Host struct {
	NetNS        string // network namespace name
	Addr         string // the host's address, e.g. 10.250.77.2
	SSHPort      int
	User         string
	Key          string   // private key authorized for User
	HostKeys     []string // the host's public key files (ed25519, ecdsa)
	KnownHosts   string   // a known_hosts file with the host's ed25519 key
	SSHConfig    string   // aliases sbx-remote and sbx-remote-jumped
	SSHDConfig   string
	DockerSocket string // the remote engine's socket (reachable here too)
	TLSHost      string // tcp://ADDR:2376
	TLSCertPath  string // DOCKER_CERT_PATH for TLSHost
	Images       []string
}

// SSHHost is docker_host for the harness: ssh://user@addr:port.
func (h *Host) SSHHost() string {
	return fmt.Sprintf("ssh://%s@%s:%d", h.User, h.Addr, h.SSHPort)
}

var (
	once    sync.Once
	host    *Host
	hostErr error
)

// Get returns the harness host, running `scripts/remote-harness.sh up`
// once per test binary when it is not up. It skips t (fails it under
// SBX_REQUIRE_REMOTE=1) when the harness cannot be made.
func Get(t testing.TB) *Host {
	t.Helper()
	once.Do(func() { host, hostErr = setUp() })
	if hostErr != nil {
		unavailable(t, "remote Docker harness: %v", hostErr)
	}
	return host
}

func setUp() (*Host, error) {
	envFile := os.Getenv(EnvFile)
	if envFile == "" {
		envFile = defaultEnvFile
	}
	if os.Getenv(EnvFile) == "" {
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("needs root to make a network namespace with dockerd and sshd (run scripts/remote-harness.sh up as root and set %s)", EnvFile)
		}
		for _, tool := range []string{"ip", "nsenter", "dockerd"} {
			if _, err := exec.LookPath(tool); err != nil {
				return nil, fmt.Errorf("needs %s on PATH", tool)
			}
		}
		if _, err := harness.Up("remote-harness.sh", 10*time.Minute); err != nil {
			return nil, err
		}
	}
	return readEnv(envFile)
}

func readEnv(path string) (*Host, error) {
	env, err := harness.ReadEnv(path, "remote-harness.sh")
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(env["SBX_REMOTE_SSH_PORT"])
	if err != nil {
		return nil, fmt.Errorf("%s: bad SBX_REMOTE_SSH_PORT %q", path, env["SBX_REMOTE_SSH_PORT"])
	}
	h := &Host{
		NetNS:        env["SBX_REMOTE_NETNS"],
		Addr:         env["SBX_REMOTE_ADDR"],
		SSHPort:      port,
		User:         env["SBX_REMOTE_USER"],
		Key:          env["SBX_REMOTE_KEY"],
		HostKeys:     strings.Fields(env["SBX_REMOTE_HOST_KEYS"]),
		KnownHosts:   env["SBX_REMOTE_KNOWN_HOSTS"],
		SSHConfig:    env["SBX_REMOTE_SSH_CONFIG"],
		SSHDConfig:   env["SBX_REMOTE_SSHD_CONFIG"],
		DockerSocket: env["SBX_REMOTE_DOCKER_SOCKET"],
		TLSHost:      env["SBX_REMOTE_TLS_HOST"],
		TLSCertPath:  env["SBX_REMOTE_TLS_CERT_PATH"],
		Images:       strings.Fields(env["SBX_REMOTE_IMAGES"]),
	}
	if h.Addr == "" || h.DockerSocket == "" || h.Key == "" {
		return nil, fmt.Errorf("%s is incomplete (run scripts/remote-harness.sh up)", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+h.DockerSocket), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx); err != nil {
		return nil, fmt.Errorf("the harness's dockerd does not answer at %s: %v (run scripts/remote-harness.sh up)", h.DockerSocket, err)
	}
	return h, nil
}

// DockerClient returns a client for the remote engine's socket, straight
// (not over SSH), for checking what landed there. Closed when t ends.
func (h *Host) DockerClient(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost("unix://"+h.DockerSocket), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// HostKey returns the host's public key file of type ("ed25519", "ecdsa").
func (h *Host) HostKey(t testing.TB, typ string) string {
	t.Helper()
	for _, k := range h.HostKeys {
		if strings.Contains(filepath.Base(k), typ) {
			return k
		}
	}
	t.Fatalf("the harness has no %s host key (have %v)", typ, h.HostKeys)
	return ""
}

// InNetNS returns a command that runs in the harness's network namespace
// (only that one: nsenter --net, not ip netns exec).
func (h *Host) InNetNS(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + h.NetNS, name}, args...)...)
}

// IfUp returns the host when an earlier Get in this test binary found it,
// else nil: for TestMain's leftover check, which must not start anything.
func IfUp() *Host {
	if host == nil || hostErr != nil {
		return nil
	}
	return host
}
