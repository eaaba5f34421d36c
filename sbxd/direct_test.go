package sbxd_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// directLocal is a local sandbox that is an sbxd.DirectDialer: the local
// backend runs the agent as a process of this machine, so its port is
// reached on the loopback address. dial, when set, replaces the dial (a
// test's impostor, an unreachable sandbox).
type directLocal struct {
	backend.Sandbox
	dial  func(ctx context.Context, port int) (net.Conn, error)
	dials atomic.Int64

	mu    sync.Mutex
	port  int
	conns []net.Conn
}

func (d *directLocal) Unwrap() backend.Sandbox { return d.Sandbox }

func (d *directLocal) DialDirect(ctx context.Context, port int) (net.Conn, error) {
	d.dials.Add(1)
	d.mu.Lock()
	d.port = port
	d.mu.Unlock()
	if d.dial != nil {
		return d.dial(ctx, port)
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

// directBackend gives every sandbox of a backend the direct path; direct
// counts the agents reached directly.
type directBackend struct {
	backend.Backend
	direct *atomic.Int64
}

func (b directBackend) Unwrap() backend.Backend { return b.Backend }

func (b directBackend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &directLocal{Sandbox: sb, dial: b.dial}, nil
}

func (b directBackend) dial(ctx context.Context, port int) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err == nil {
		b.direct.Add(1)
	}
	return c, err
}

func (b directBackend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	sb, err := b.Backend.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &directLocal{Sandbox: sb, dial: b.dial}, nil
}

// createDirect makes a local sandbox wrapped as d, and a started client.
func createDirect(t *testing.T, d *directLocal) *sbxd.Client {
	t.Helper()
	b := newLocal(t)
	sb, err := b.Create(t.Context(), backend.Spec{Name: "sbxd-direct", TTL: 30 * time.Minute})
	require.NoError(t, err)
	d.Sandbox = sb
	c, err := sbxd.Wrap(t.Context(), d, sbxd.WithAgentPath(agentBin), sbxd.WithLogger(noWarnings(t)))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, c.Destroy(ctx))
	})
	require.NoError(t, c.Fallback(), "the agent did not start")
	return c
}

func echo(t *testing.T, c *sbxd.Client) {
	t.Helper()
	res, err := c.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"echo", "ok"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, "ok\n", string(res.Stdout))
}

func TestDirectUsedWhenReachable(t *testing.T) {
	d := &directLocal{}
	c := createDirect(t, d)
	info, err := c.Agent(t.Context())
	require.NoError(t, err)
	require.True(t, info.Direct, "the agent is reached directly")
	before := info.DirectStreams
	echo(t, c)
	info, err = c.Agent(t.Context())
	require.NoError(t, err)
	assert.Greater(t, info.DirectStreams, before, "the command went over the direct connection")
	assert.EqualValues(t, 1, d.dials.Load())
}

// The suite through direct connections: every call but starting the agent
// goes over TLS on TCP.
func TestConformanceLocalDirect(t *testing.T) {
	b := directBackend{newLocal(t), new(atomic.Int64)}
	log := noWarnings(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return sbxd.WrapBackend(b, sbxd.WithAgentPath(agentBin), sbxd.WithLogger(log))
	}, backendtest.WithoutCapabilityRerun())
	assert.Positive(t, b.direct.Load(), "no agent was reached directly")
}

// Without the token, a TLS connection to the agent's port gets nothing:
// the agent closes it unanswered.
func TestDirectWrongTokenRefused(t *testing.T) {
	d := &directLocal{}
	c := createDirect(t, d)
	info, err := c.Agent(t.Context())
	require.NoError(t, err)
	require.True(t, info.Direct)
	d.mu.Lock()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port))
	d.mu.Unlock()
	for _, tc := range []struct {
		name  string
		token []byte
	}{
		{"wrong token", make([]byte, 32)},
		{"short token", []byte("x")},
		{"no token", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			require.NoError(t, err)
			defer conn.Close()
			if tc.token != nil {
				_, err = conn.Write(tc.token)
				require.NoError(t, err)
			}
			if len(tc.token) < 32 {
				// The agent waits for the rest until its deadline; a
				// half-closed write ends that wait.
				conn.CloseWrite()
			}
			sess, err := yamux.Client(conn, nil)
			require.NoError(t, err)
			defer sess.Close()
			conn.SetDeadline(time.Now().Add(15 * time.Second))
			st, err := sess.Open()
			if err == nil {
				_, err = io.WriteString(st, "GET /v1/hello HTTP/1.1\r\nHost: sbxd\r\n\r\n")
			}
			if err == nil {
				var buf [1]byte
				_, err = st.Read(buf[:])
			}
			require.Error(t, err, "the agent answered a connection without the token")
		})
	}
	// The client's own connection is unharmed.
	echo(t, c)
	info, err = c.Agent(t.Context())
	require.NoError(t, err)
	assert.True(t, info.Direct)
}

// A server with another certificate (anything on the network between that
// answers on the pod's address) gets neither calls nor the token: the
// client refuses it in the handshake and uses the attached stream.
func TestDirectOtherCertificateRefused(t *testing.T) {
	cert := otherCert(t)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	require.NoError(t, err)
	defer l.Close()
	got := make(chan []byte, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(conn) // ends when the client gives up
		got <- b
	}()
	d := &directLocal{dial: func(ctx context.Context, port int) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "tcp", l.Addr().String())
	}}
	c := createDirect(t, d)
	info, err := c.Agent(t.Context())
	require.NoError(t, err)
	assert.False(t, info.Direct, "the client used an impostor")
	assert.EqualValues(t, 1, d.dials.Load())
	select {
	case b := <-got:
		assert.Empty(t, b, "the impostor received bytes after the handshake")
	case <-time.After(15 * time.Second):
		t.Fatal("the client kept the impostor's connection open")
	}
	echo(t, c)
}

func otherCert(t *testing.T) tls.Certificate {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// An unreachable sandbox, or one that offers no direct path: the attached
// stream carries every call.
func TestDirectUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("i/o timeout")}},
		{"turned off", errors.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &directLocal{dial: func(context.Context, int) (net.Conn, error) { return nil, tc.err }}
			c := createDirect(t, d)
			echo(t, c)
			info, err := c.Agent(t.Context())
			require.NoError(t, err)
			assert.False(t, info.Direct)
			assert.Zero(t, info.DirectStreams)
			assert.EqualValues(t, 1, d.dials.Load(), "one probe per agent")
		})
	}
}

// A dropped direct connection: calls take the attached stream at once,
// and the client reconnects in the background.
func TestDirectDroppedReconnects(t *testing.T) {
	d := &directLocal{}
	c := createDirect(t, d)
	echo(t, c)
	d.mu.Lock()
	for _, conn := range d.conns {
		conn.Close()
	}
	d.mu.Unlock()
	echo(t, c) // over the attached stream, or the new direct connection
	require.Eventually(t, func() bool {
		info, err := c.Agent(t.Context())
		return err == nil && info.Direct && d.dials.Load() == 2
	}, 10*time.Second, 20*time.Millisecond, "no reconnection")
	info, _ := c.Agent(t.Context())
	echo(t, c)
	after, err := c.Agent(t.Context())
	require.NoError(t, err)
	assert.Greater(t, after.DirectStreams, info.DirectStreams)
	assert.Equal(t, info.PID, after.PID, "the same agent")
}

// Closing the client ends the agent's listener with its attached stream.
func TestDirectListenerEndsWithAgent(t *testing.T) {
	d := &directLocal{}
	c := createDirect(t, d)
	echo(t, c)
	d.mu.Lock()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(d.port))
	d.mu.Unlock()
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	}, 10*time.Second, 20*time.Millisecond, "the agent still listens after its client closed it")
}
