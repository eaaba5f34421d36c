package sbxd

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/sandboxkit/sandboxkit/backend"
)

// DirectDialer is implemented by sandboxes (found through Unwrap chains)
// that this process may reach over the network by a shorter way than
// their attached stream: the k8s backend's pods, whose attached stream
// runs through the API server, the kubelet and the container runtime,
// while their pod IP is often one hop away. The client then also talks to
// the agent it started over a direct connection:
//
//  1. over the attached stream it gives the agent a random token; the
//     agent makes a key pair and a self-signed certificate, listens on a
//     TCP port of the sandbox and answers with the port and the
//     certificate's SHA-256;
//  2. the client dials the port with DialDirect, runs TLS 1.3 pinned to
//     that certificate, sends the token inside it and checks that the
//     agent answering is the one of the attached stream (its hello and
//     PID);
//  3. calls go over the direct connection from then on; the attached
//     stream stays open: the agent's life and the listener's are bound to
//     it, as before.
//
// Nothing of it is in the sandbox's definition (pod spec, annotations,
// environment): the token and the key exist only in the agent's memory and
// this process, and go only over the attached stream, which the backend
// authenticated, and inside the pinned TLS connection. Another host or
// pod that connects gets a TLS handshake and nothing else.
//
// When DialDirect fails (the sandbox is not reachable from here, or
// offers no direct path), the client uses the attached stream alone, as
// without a DirectDialer. When a direct connection drops, calls in flight
// on it fail, later ones take the attached stream at once, and the client
// reconnects in the background.
type DirectDialer interface {
	// DialDirect connects to TCP port of the sandbox. It is a probe: it
	// fails within a short time when the sandbox cannot be reached from
	// here, and with an error wrapping errors.ErrUnsupported when the
	// sandbox offers no direct path (turned off, no network).
	DialDirect(ctx context.Context, port int) (net.Conn, error)
}

// startDirect asks the agent conn leads to for direct connections and
// makes one when the sandbox is a DirectDialer that reaches it; otherwise
// conn keeps using its attached stream alone.
func (c *Client) startDirect(ctx context.Context, conn *agentConn) {
	dd, ok := backend.As[DirectDialer](c.sb)
	if !ok {
		return
	}
	log := c.opts.log.With("sandbox", c.sb.ID())
	token := make([]byte, directTokenLen)
	rand.Read(token)
	var ans directAnswer
	if err := conn.postJSON(ctx, routeDirect, directRequest{Token: hex.EncodeToString(token)}, &ans); err != nil {
		log.Debug("sbxd: the agent does not listen for direct connections; using its attached stream", "err", err)
		return
	}
	d := &directConn{dialer: dd, port: ans.Port, token: token, pid: conn.hello.PID, log: log, agent: conn}
	if n, err := hex.Decode(d.pin[:], []byte(ans.CertSHA256)); err != nil || n != sha256.Size || ans.Port <= 0 {
		log.Warn("sbxd: the agent's answer to a direct connection request is malformed; using its attached stream", "answer", ans)
		return
	}
	sess, err := d.connect(ctx)
	if err != nil {
		log.Debug("sbxd: no direct connection to the agent; using its attached stream", "port", ans.Port, "err", err)
		return
	}
	conn.direct = d
	d.use(sess)
	log.Debug("sbxd: calls go over a direct connection to the agent", "port", ans.Port)
}

// directConn is an agent's direct connection, and how to make it again.
type directConn struct {
	dialer DirectDialer
	port   int
	pin    [sha256.Size]byte
	token  []byte
	pid    int // the agent's, from the attached stream's hello
	log    *slog.Logger
	agent  *agentConn

	cur    atomic.Pointer[yamux.Session] // nil while down
	opened atomic.Int64                  // streams opened over it
	closed atomic.Bool
}

// open opens a stream over the direct connection; false while it is down.
func (d *directConn) open() (net.Conn, bool) {
	sess := d.cur.Load()
	if sess == nil {
		return nil, false
	}
	st, err := sess.Open()
	if err != nil {
		return nil, false
	}
	d.opened.Add(1)
	return st, true
}

func (d *directConn) down() bool { return d.cur.Load() == nil }

func (d *directConn) close() {
	d.closed.Store(true)
	if sess := d.cur.Swap(nil); sess != nil {
		sess.Close()
	}
}

// ended reports whether no direct connection is wanted any more: the
// client closed the agent, or its attached stream ended (which ends the
// agent's listener too).
func (d *directConn) ended() bool { return d.closed.Load() || d.agent.dead() }

// use makes sess the direct connection and watches it.
func (d *directConn) use(sess *yamux.Session) {
	d.cur.Store(sess)
	if d.ended() {
		d.close()
		return
	}
	// Idle streams of the attached stream would otherwise carry the next
	// calls.
	d.agent.closeIdle()
	go d.watch(sess)
}

// watch waits for sess to end and, unless the agent is gone, reconnects
// in the background; calls take the attached stream meanwhile.
func (d *directConn) watch(sess *yamux.Session) {
	select {
	case <-sess.CloseChan():
	case <-d.agent.done:
		sess.Close()
	}
	d.cur.CompareAndSwap(sess, nil)
	d.agent.closeIdle()
	if d.ended() {
		return
	}
	d.log.Debug("sbxd: the direct connection to the agent dropped; using its attached stream and reconnecting")
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 30*time.Second) {
		select {
		case <-time.After(delay):
		case <-d.agent.done:
			return
		}
		if d.ended() {
			return
		}
		next, err := d.connect(context.Background())
		if err == nil {
			d.log.Debug("sbxd: reconnected directly to the agent")
			d.use(next)
			return
		}
		d.log.Debug("sbxd: reconnecting directly to the agent failed", "err", err, "retry_in", min(2*delay, 30*time.Second))
	}
}

// connect makes a direct connection: DialDirect, TLS pinned to the
// agent's certificate, the token, and a hello from the same agent.
func (d *directConn) connect(ctx context.Context) (*yamux.Session, error) {
	// Something that takes the connection and never answers must not
	// hold up the agent's start.
	ctx, cancel := context.WithTimeout(ctx, directAuthTimeout)
	defer cancel()
	nc, err := d.dialer.DialDirect(ctx, d.port)
	if err != nil {
		return nil, err
	}
	dl, _ := ctx.Deadline()
	nc.SetDeadline(dl)
	tc := tls.Client(nc, &tls.Config{
		// The certificate is self-signed: VerifyConnection checks it
		// against the one the agent reported over the attached stream,
		// which is stricter than any chain of authorities.
		InsecureSkipVerify: true,
		VerifyConnection:   d.verify,
		MinVersion:         tls.VersionTLS13,
		ServerName:         "sbxd",
	})
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("TLS with the agent at port %d: %w", d.port, err)
	}
	if _, err := tc.Write(d.token); err != nil {
		nc.Close()
		return nil, fmt.Errorf("sending the token to the agent at port %d: %w", d.port, err)
	}
	sess, err := yamux.Client(tc, yamuxConfig())
	if err != nil {
		nc.Close()
		return nil, err
	}
	h, err := helloOver(sess, dl)
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("the agent at port %d did not answer over the direct connection (a wrong token is refused unanswered): %w", d.port, err)
	}
	if h.PID != d.pid || h.Protocol != ProtocolVersion {
		sess.Close()
		return nil, fmt.Errorf("the agent at port %d is not the attached one (pid %d protocol %d, want pid %d protocol %d)", d.port, h.PID, h.Protocol, d.pid, ProtocolVersion)
	}
	nc.SetDeadline(time.Time{})
	return sess, nil
}

// verify accepts only the certificate the agent reported.
func (d *directConn) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 || sha256.Sum256(cs.PeerCertificates[0].Raw) != d.pin {
		return errors.New("the server's certificate is not the one the agent reported over its attached stream")
	}
	return nil
}

// helloOver asks for the agent's hello over a new stream of sess.
func helloOver(sess *yamux.Session, deadline time.Time) (hello, error) {
	st, err := sess.Open()
	if err != nil {
		return hello{}, err
	}
	defer st.Close()
	st.SetDeadline(deadline)
	req, _ := http.NewRequest(http.MethodGet, agentURL+routeHello, nil)
	if err := req.Write(st); err != nil {
		return hello{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(st), req)
	if err != nil {
		return hello{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return hello{}, responseError(resp)
	}
	var h hello
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return hello{}, err
	}
	return h, nil
}
