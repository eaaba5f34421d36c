package k8s_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// portRecorder notes the port the agent listens on for direct connections.
type portRecorder struct {
	backend.Sandbox
	mu   sync.Mutex
	port int
}

func (p *portRecorder) Unwrap() backend.Sandbox { return p.Sandbox }

func (p *portRecorder) DialDirect(ctx context.Context, port int) (net.Conn, error) {
	p.mu.Lock()
	p.port = port
	p.mu.Unlock()
	d, _ := backend.As[sbxd.DirectDialer](p.Sandbox)
	return d.DialDirect(ctx, port)
}

// Another client on the pod network (this host) that connects to the
// agent's port gets a TLS handshake and nothing else without the token.
func TestDirectAgentRefusesStrangers(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	sb := create(t, b, spec("direct", k8stest.BusyboxImage))
	rec := &portRecorder{Sandbox: sb}
	ctx := t.Context()
	cl, err := sbxd.Wrap(ctx, rec)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	info, err := cl.Agent(ctx)
	require.NoError(t, err)
	require.True(t, info.Direct, "the agent is not reached directly")
	pod, err := c.Client(t).CoreV1().Pods(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	rec.mu.Lock()
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(rec.port))
	rec.mu.Unlock()

	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write(make([]byte, 32)) // a wrong token
	require.NoError(t, err)
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	sess, err := yamux.Client(conn, nil)
	require.NoError(t, err)
	defer sess.Close()
	st, err := sess.Open()
	if err == nil {
		_, err = io.WriteString(st, "GET /v1/hello HTTP/1.1\r\nHost: sbxd\r\n\r\n")
	}
	if err == nil {
		var buf [1]byte
		_, err = st.Read(buf[:])
	}
	require.Error(t, err, "the agent answered a connection with a wrong token")

	res, err := cl.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "ok"}})
	require.NoError(t, err)
	require.Equal(t, "ok\n", string(res.Stdout))
}

// Get stops finding a destroyed sandbox at once; WaitRemoved returns only
// once its pod has left the API server (the kubelet tore it down).
func TestWaitRemoved(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	ctx := t.Context()
	require.NoError(t, b.WaitRemoved(ctx, "no-such-pod"), "a pod that never existed")
	require.NoError(t, b.WaitRemoved(ctx, "Not A Pod Name!"), "a name no pod can have")

	sb := create(t, b, spec("removed", k8stest.BusyboxImage))
	require.NoError(t, sb.Destroy(ctx))
	_, err := b.Get(ctx, sb.ID())
	require.ErrorIs(t, err, backend.ErrNotFound)

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, b.WaitRemoved(wctx, sb.ID()))
	_, err = c.Client(t).CoreV1().Pods(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the pod is still in the API server after WaitRemoved: %v", err)

	// A canceled wait says so.
	sb2 := create(t, b, spec("removed2", k8stest.BusyboxImage))
	cctx, cancel2 := context.WithCancel(ctx)
	cancel2()
	require.ErrorIs(t, b.WaitRemoved(cctx, sb2.ID()), context.Canceled)
}

// The k8s backend refuses an egress policy, saying why, and makes nothing.
func TestEgressRefused(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	s := spec("egress", k8stest.BusyboxImage)
	s.Egress = &backend.Egress{Allow: []string{"pypi.org:443"}}
	_, err := b.Create(t.Context(), s)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.Contains(t, err.Error(), "egress (it needs a network plugin that enforces NetworkPolicy")
	pods, err := c.Client(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, pods.Items, "a refused create made a pod")
}
