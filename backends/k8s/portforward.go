//lint:file-ignore SA1019 client-go's dialers (portforward, remotecommand) still take and give apimachinery's httpstream types

package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	httpstreamspdy "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	pfconst "k8s.io/apimachinery/pkg/util/portforward"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/transport/websocket"
	streamhttp "k8s.io/streaming/pkg/httpstream"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Endpoint returns a loopback address on this machine that reaches port
// in the pod through the API server (what kubectl port-forward does), so a
// host program outside the cluster can dial a sandbox's service. The
// forward lives until Destroy or Backend.Close. A connection made before
// the pod's server listens is closed, and the next one is forwarded anew
// (readiness probes connect early); a forward whose connection to the API
// server dropped dials again at the next connection.
func (s *Sandbox) Endpoint(ctx context.Context, port int) (string, error) {
	if port <= 0 || port > 65535 {
		return "", s.opErr("endpoint", fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, port))
	}
	if s.destroyed.Load() {
		return "", s.opErr("endpoint", s.gone())
	}
	if !slices.Contains(s.ports, port) {
		return "", s.opErr("endpoint", fmt.Errorf("%w: port %d/tcp is not published (add it to the sandbox entry's ports)", backend.ErrNotFound, port))
	}
	addr, err := s.b.forwardFor(ctx, s.pod, port, s.hostAddrs[port])
	if err != nil {
		return "", s.opErr("endpoint", s.explain(ctx, err))
	}
	return addr, nil
}

const (
	// forwardDialTimeout bounds one dial of a pod's portforward
	// subresource (TCP, TLS and the upgrade).
	forwardDialTimeout = 30 * time.Second
	// After a failed dial, connections are closed without a new dial
	// for a while, growing from forwardRetryMin to forwardRetryMax, so
	// a client that reconnects in a loop does not hammer the API server.
	forwardRetryMin = 250 * time.Millisecond
	forwardRetryMax = 10 * time.Second
	// errorReportWait: how long a finished connection waits for the
	// kubelet's report on its error stream before dropping it.
	errorReportWait = 2 * time.Second
)

var errForwardClosed = errors.New("the port forward is closed")

type forwardKey struct {
	pod  string
	port int
}

// forward is one port forward: a listener of ours on this machine whose
// every accepted connection becomes its own pair of streams (data and
// error) on a port-forward connection to the pod through the API server.
// client-go's PortForwarder closes its whole connection, and with it its
// listener, when the pod refuses one stream (nothing listens yet there);
// here a refused stream only closes the local connection it serves, and a
// connection that died is dialed again by the next accepted one.
type forward struct {
	b    *Backend
	pod  string
	port int
	ln   net.Listener
	addr string

	ctx       context.Context // cancelled by close
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup // the accept loop and one per local connection

	requestID atomic.Int64

	mu       sync.Mutex
	conn     httpstream.Connection // the connection in use, or nil
	dialing  *dialCall             // the dial in flight, or nil
	failures int                   // dials failed in a row
	lastErr  error                 // the last failed dial's
	retryAt  time.Time             // no dial before this
}

// dialCall is one dial that every connection waiting for it shares.
type dialCall struct {
	done chan struct{}
	conn httpstream.Connection
	err  error
}

// forwardFor returns the forward to a pod's port, starting one when there
// is none; local is where it listens ("" for a free loopback port). A
// forward that has no live connection dials now, so that a pod that went
// away shows as an error here.
func (b *Backend) forwardFor(ctx context.Context, pod string, port int, local string) (string, error) {
	key := forwardKey{pod, port}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return "", errors.New("the backend is closed")
	}
	if f, ok := b.forwards[key]; ok {
		b.mu.Unlock()
		if _, err := f.session(ctx); err != nil {
			return "", b.translate(err)
		}
		return f.addr, nil
	}
	b.mu.Unlock()

	f, err := b.startForward(ctx, pod, port, local)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	if old, ok := b.forwards[key]; ok || b.closed {
		// Another call won the race (or Close came): keep one forward.
		b.mu.Unlock()
		f.close()
		if ok {
			return old.addr, nil
		}
		return "", errors.New("the backend is closed")
	}
	b.forwards[key] = f
	b.mu.Unlock()
	return f.addr, nil
}

// startForward listens on local, dials the pod's portforward subresource
// once (so that a pod that is gone or a missing RBAC right shows now) and
// starts accepting.
func (b *Backend) startForward(ctx context.Context, pod string, port int, local string) (*forward, error) {
	addr := "127.0.0.1:0"
	if local != "" {
		if _, _, err := net.SplitHostPort(local); err != nil {
			return nil, fmt.Errorf("%w: host address %q of port %d: %v", backend.ErrInvalidConfig, local, port, err)
		}
		addr = local
	}
	if b.rest == nil {
		return nil, fmt.Errorf("%w: no REST config (a fake clientset)", errors.ErrUnsupported)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("port forward to %s:%d: %w", pod, port, err)
	}
	f := &forward{b: b, pod: pod, port: port, ln: ln, addr: ln.Addr().String()}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if _, err := f.session(ctx); err != nil {
		f.close()
		return nil, b.translate(err)
	}
	f.wg.Add(1)
	go f.acceptLoop()
	return f, nil
}

// acceptLoop serves each local connection in a goroutine of its own until
// the forward is closed.
func (f *forward) acceptLoop() {
	defer f.wg.Done()
	var delay time.Duration
	for {
		local, err := f.ln.Accept()
		if err != nil {
			if f.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait a little, as
			// net/http's server does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			f.b.log.Warn("port forward: accepting a connection failed", "pod", f.pod, "port", f.port, "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
			case <-f.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.serve(local)
		}()
	}
}

// close stops accepting, ends every connection of the forward and waits
// for its goroutines (a dial in flight ends by itself, bounded by
// forwardDialTimeout, and closes what it got).
func (f *forward) close() {
	f.closeOnce.Do(func() {
		f.cancel()
		f.ln.Close()
		f.mu.Lock()
		if f.conn != nil {
			f.conn.Close()
			f.conn = nil
		}
		f.mu.Unlock()
	})
	f.wg.Wait()
}

// session returns the forward's live connection to the pod, dialing one
// when there is none. Dials are shared by the callers that wait for them
// and spaced out after failures: a caller that comes while the last dial's
// failure is fresh gets that failure without a dial.
func (f *forward) session(ctx context.Context) (httpstream.Connection, error) {
	f.mu.Lock()
	if f.ctx.Err() != nil {
		f.mu.Unlock()
		return nil, errForwardClosed
	}
	if f.conn != nil && !isClosed(f.conn) {
		c := f.conn
		f.mu.Unlock()
		return c, nil
	}
	call := f.dialing
	if call == nil {
		if wait := time.Until(f.retryAt); wait > 0 {
			err := f.lastErr
			f.mu.Unlock()
			return nil, fmt.Errorf("%w (next try in %v)", err, wait.Round(time.Millisecond))
		}
		call = &dialCall{done: make(chan struct{})}
		f.dialing = call
		go f.dial(call)
	}
	f.mu.Unlock()
	select {
	case <-call.done:
		return call.conn, call.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.ctx.Done():
		return nil, errForwardClosed
	}
}

// dial makes the forward's connection for call, bounded by
// forwardDialTimeout and cancelled by close.
func (f *forward) dial(call *dialCall) {
	ctx, cancel := context.WithTimeout(f.ctx, forwardDialTimeout)
	conn, err := f.b.dialPortForward(ctx, f.pod)
	cancel()
	f.mu.Lock()
	f.dialing = nil
	switch {
	case f.ctx.Err() != nil:
		if conn != nil {
			conn.Close()
		}
		conn, err = nil, errForwardClosed
	case err != nil:
		f.failures++
		f.lastErr = err
		f.retryAt = time.Now().Add(retryDelay(f.failures))
		f.b.log.Warn("port forward: dialing the pod failed", "pod", f.pod, "port", f.port, "err", err, "failures", f.failures)
	default:
		if f.conn != nil {
			f.conn.Close()
		}
		f.conn, f.failures, f.lastErr = conn, 0, nil
	}
	call.conn, call.err = conn, err
	f.mu.Unlock()
	close(call.done)
}

// retryDelay is the wait after n failed dials in a row.
func retryDelay(n int) time.Duration {
	return min(forwardRetryMin<<min(n-1, 10), forwardRetryMax)
}

func isClosed(c httpstream.Connection) bool {
	select {
	case <-c.CloseChan():
		return true
	default:
		return false
	}
}

// drop closes conn, which failed, so that the next connection dials anew.
func (f *forward) drop(conn httpstream.Connection) {
	f.mu.Lock()
	if f.conn == conn {
		f.conn = nil
	}
	f.mu.Unlock()
	conn.Close()
}

// serve forwards one local connection and closes it.
func (f *forward) serve(local net.Conn) {
	defer local.Close()
	conn, err := f.session(f.ctx)
	if err != nil {
		f.b.log.Debug("port forward: closing a local connection, no connection to the pod", "pod", f.pod, "port", f.port, "err", err)
		return
	}
	if err := f.pipe(conn, local); err != nil {
		f.b.log.Debug("port forward: a connection failed", "pod", f.pod, "port", f.port, "err", err)
	}
}

// pipe copies between local and a new pair of streams on conn until
// either side is done, the pod reports an error (nothing listens on the
// port: local is closed, the connection stays) or the forward closes.
func (f *forward) pipe(conn httpstream.Connection, local net.Conn) error {
	errStream, data, err := f.openStreams(conn)
	if err != nil {
		f.drop(conn)
		return err
	}
	defer conn.RemoveStreams(errStream, data)

	report := make(chan string, 1)
	go func() {
		msg, _ := io.ReadAll(io.LimitReader(errStream, 64<<10))
		report <- string(msg)
	}()
	var copies sync.WaitGroup
	toLocal := make(chan struct{})
	toPod := make(chan error, 1)
	copies.Go(func() {
		io.Copy(local, data)
		close(toLocal)
	})
	copies.Go(func() {
		_, err := io.Copy(data, local)
		data.Close() // the pod's side reads EOF
		toPod <- err
	})

	msg, reported := "", false
wait:
	for {
		select {
		case <-toLocal:
			break wait
		case err := <-toPod:
			if err != nil {
				break wait
			}
			toPod = nil // the client is done sending: wait for the pod's side
		case msg = <-report:
			reported = true
			if msg != "" {
				break wait
			}
			report = nil
		case <-conn.CloseChan():
			break wait
		case <-f.ctx.Done():
			break wait
		}
	}
	data.Reset()
	local.Close()
	copies.Wait()
	if !reported {
		select {
		case msg = <-report:
		case <-time.After(errorReportWait):
			errStream.Reset()
			msg = <-report
		case <-f.ctx.Done():
			errStream.Reset()
			msg = <-report
		}
	}
	if msg != "" {
		return errors.New(msg)
	}
	return nil
}

// openStreams opens the error and data streams of one forwarded
// connection on conn. Opening waits for the other side's reply, which
// httpstream bounds at 30 s and which neither closing conn nor the
// forward ends; so it runs aside, and a forward that closes (or a
// connection that drops) meanwhile is not held up: the streams it
// opens later are reset.
func (f *forward) openStreams(conn httpstream.Connection) (errStream, data httpstream.Stream, err error) {
	type opened struct {
		errStream, data httpstream.Stream
		err             error
	}
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(f.port))
	h.Set(corev1.PortForwardRequestIDHeader, strconv.FormatInt(f.requestID.Add(1)-1, 10))
	done := make(chan opened) // unbuffered: a send happens only to a waiting pipe
	abandoned := make(chan struct{})
	go func() {
		var o opened
		defer func() {
			select {
			case done <- o:
			case <-abandoned:
				for _, s := range []httpstream.Stream{o.errStream, o.data} {
					if s != nil {
						s.Reset()
						conn.RemoveStreams(s)
					}
				}
			}
		}()
		if o.errStream, o.err = conn.CreateStream(h); o.err != nil {
			o.err = fmt.Errorf("opening an error stream: %w", o.err)
			return
		}
		o.errStream.Close() // we write nothing on it
		h.Set(corev1.StreamType, corev1.StreamTypeData)
		if o.data, o.err = conn.CreateStream(h); o.err != nil {
			o.errStream.Reset()
			conn.RemoveStreams(o.errStream)
			o.errStream, o.err = nil, fmt.Errorf("opening a data stream: %w", o.err)
		}
	}()
	select {
	case o := <-done:
		return o.errStream, o.data, o.err
	case <-conn.CloseChan():
		close(abandoned)
		return nil, nil, errors.New("opening streams: the connection to the pod closed")
	case <-f.ctx.Done():
		close(abandoned)
		return nil, nil, errForwardClosed
	}
}

// dialPortForward opens a port-forward connection to pod through the API
// server: SPDY tunnelled over a websocket, or plain SPDY from API servers
// older than 1.30 (or RBAC that grants create but not get on
// pods/portforward), as kubectl does. ctx bounds the dial only.
func (b *Backend) dialPortForward(ctx context.Context, pod string) (httpstream.Connection, error) {
	u, err := b.subresourceURL(pod, "portforward", nil)
	if err != nil {
		return nil, err
	}
	conn, err := dialWebsocket(ctx, b.rest, u)
	if err == nil || ctx.Err() != nil || !(streamhttp.IsUpgradeFailure(err) || httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)) {
		return conn, err
	}
	conn, serr := dialSPDY(ctx, b.rest, u)
	if serr == nil {
		return conn, nil
	}
	// The websocket's failure may carry the API server's own answer (no
	// such pod, no RBAC right), which says more than SPDY's text.
	var uf *streamhttp.UpgradeFailureError
	if errors.As(err, &uf) && (apierrors.IsNotFound(uf.Cause) || apierrors.IsForbidden(uf.Cause)) {
		return nil, uf.Cause
	}
	return nil, serr
}

func dialWebsocket(ctx context.Context, rc *rest.Config, u *url.URL) (httpstream.Connection, error) {
	rt, holder, err := websocket.RoundTripperFor(rc)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	ws, err := websocket.Negotiate(rt, holder, req, pfconst.WebsocketsSPDYTunnelingPortForwardV1)
	if err != nil {
		return nil, err
	}
	if ws == nil {
		return nil, errors.New("the websocket upgrade gave no connection")
	}
	conn, err := httpstreamspdy.NewClientConnectionWithPings(portforward.NewTunnelingConnection("client", ws), portforward.PingPeriod)
	if err != nil {
		ws.Close()
		return nil, err
	}
	return conn, nil
}

func dialSPDY(ctx context.Context, rc *rest.Config, u *url.URL) (httpstream.Connection, error) {
	rt, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return nil, err
	}
	conn, protocol, err := spdy.Negotiate(upgrader, &http.Client{Transport: rt}, req, portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, err
	}
	if protocol != portforward.PortForwardProtocolV1Name {
		conn.Close()
		return nil, fmt.Errorf("the API server offers port-forward protocol %q, not %q", protocol, portforward.PortForwardProtocolV1Name)
	}
	return conn, nil
}

// stopForwards ends the forwards to a pod.
func (b *Backend) stopForwards(pod string) {
	b.mu.Lock()
	var fws []*forward
	for k, f := range b.forwards {
		if k.pod == pod {
			fws = append(fws, f)
			delete(b.forwards, k)
		}
	}
	b.mu.Unlock()
	for _, f := range fws {
		f.close()
	}
}

// ClusterAddress is where callers inside the cluster reach a published
// port: the sandbox's Service ("<pod>.<namespace>.svc:<port>"). It needs
// service = true in [sandbox.k8s]; ErrNotFound otherwise.
func (s *Sandbox) ClusterAddress(ctx context.Context, port int) (string, error) {
	if !slices.Contains(s.ports, port) {
		return "", s.opErr("cluster address", fmt.Errorf("%w: port %d/tcp is not published (add it to the sandbox entry's ports)", backend.ErrNotFound, port))
	}
	rctx, cancel := s.b.reqCtx(ctx)
	defer cancel()
	if _, err := s.b.kube.Services(s.b.ns).Get(rctx, s.id, metav1.GetOptions{}); err != nil {
		err = s.b.translate(err)
		if errors.Is(err, backend.ErrNotFound) {
			err = fmt.Errorf("%w: sandbox %s has no Service (set service = true in [sandbox.k8s])", backend.ErrNotFound, s.id)
		}
		return "", s.opErr("cluster address", err)
	}
	return net.JoinHostPort(s.id+"."+s.b.ns+".svc", strconv.Itoa(port)), nil
}
