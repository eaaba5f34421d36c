package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Endpoint returns a loopback address on this machine that reaches port
// in the pod through the API server (what kubectl port-forward does), so a
// host program outside the cluster can dial a sandbox's service. The
// forward lives until Destroy or Backend.Close; a forward whose connection
// dropped (the pod or API server restarted) is made anew by the next call.
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

type forwardKey struct {
	pod  string
	port int
}

// forward is one running port forward.
type forward struct {
	addr string
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func (f *forward) close() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

// forwardFor returns the forward to a pod's port, starting one when there
// is none; local is where it listens ("" for a free loopback port).
func (b *Backend) forwardFor(ctx context.Context, pod string, port int, local string) (string, error) {
	key := forwardKey{pod, port}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return "", errors.New("the backend is closed")
	}
	if f, ok := b.forwards[key]; ok {
		b.mu.Unlock()
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
	go func() {
		<-f.done
		b.mu.Lock()
		if b.forwards[key] == f {
			delete(b.forwards, key)
		}
		b.mu.Unlock()
	}()
	return f.addr, nil
}

func (b *Backend) startForward(ctx context.Context, pod string, port int, local string) (*forward, error) {
	ip, localPort := "127.0.0.1", "0"
	if local != "" {
		h, p, err := net.SplitHostPort(local)
		if err != nil {
			return nil, fmt.Errorf("%w: host address %q of port %d: %v", backend.ErrInvalidConfig, local, port, err)
		}
		ip, localPort = h, p
	}
	u, err := b.subresourceURL(pod, "portforward", nil)
	if err != nil {
		return nil, err
	}
	rt, upgrader, err := spdy.RoundTripperFor(b.rest)
	if err != nil {
		return nil, err
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	wsDialer, err := portforward.NewSPDYOverWebsocketDialer(u, b.rest)
	if err != nil {
		return nil, err
	}
	dialer := portforward.NewFallbackDialer(wsDialer, spdyDialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	f := &forward{stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{ip}, []string{localPort + ":" + strconv.Itoa(port)},
		f.stop, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, err
	}
	errc := make(chan error, 1)
	go func() {
		errc <- pf.ForwardPorts()
		close(f.done)
	}()
	select {
	case <-ready:
	case err := <-errc:
		return nil, b.translate(err)
	case <-ctx.Done():
		f.close()
		return nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		f.close()
		return nil, fmt.Errorf("port forward to %s:%d: no local port (%v)", pod, port, err)
	}
	f.addr = net.JoinHostPort(ip, strconv.Itoa(int(ports[0].Local)))
	return f, nil
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
	if _, err := s.b.cs.CoreV1().Services(s.b.ns).Get(rctx, s.id, metav1.GetOptions{}); err != nil {
		err = s.b.translate(err)
		if errors.Is(err, backend.ErrNotFound) {
			err = fmt.Errorf("%w: sandbox %s has no Service (set service = true in [sandbox.k8s])", backend.ErrNotFound, s.id)
		}
		return "", s.opErr("cluster address", err)
	}
	return net.JoinHostPort(s.id+"."+s.b.ns+".svc", strconv.Itoa(port)), nil
}
