package sbxd

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The agent's side of direct connections (see DirectDialer).
//
// A client asks for them over the attached stream, the one channel into
// the sandbox it already trusts: it sends a random token, the agent makes
// a key pair and a self-signed certificate, listens on a TCP port of the
// sandbox and answers with the port and the certificate's SHA-256. A
// direct connection is TLS with that certificate (the client pins it, so
// nobody on the network between can stand in for the agent), and its first
// bytes inside TLS must be the token; anything else is closed unanswered.
// Neither the token nor the key ever leaves the agent's memory and the
// attached stream: no file, argument, environment variable or pod field
// holds them. (A process in the sandbox that can read the agent's memory,
// root, could take them; it can take over the attached stream's
// descriptors just as well, so the trust is the attached stream's.)
//
// The listener belongs to the attached session that asked for it: when
// that session ends (the client closed the agent's stdin, or the stream
// broke), the listener closes and so do the direct sessions it accepted.

// sessionInfo is what a request knows of the session it came over.
type sessionInfo struct {
	ctx    context.Context // ends with the session
	direct bool            // a direct connection

	mu     sync.Mutex
	listen *directListener // the one this session asked for
}

type sessionKey struct{}

const (
	// directTokenLen is the token's length in bytes (it travels raw).
	directTokenLen = 32
	// directAuthTimeout bounds a direct connection's TLS handshake and
	// token.
	directAuthTimeout = 10 * time.Second
	// directPending bounds connections not yet authenticated, so that
	// other hosts of the network cannot pile them up.
	directPending = 32
)

// directListener accepts direct connections for one attached session.
type directListener struct {
	l       net.Listener
	token   []byte
	tls     *tls.Config
	sum     [sha256.Size]byte
	pending chan struct{}
}

func (s *Server) handleDirect(w http.ResponseWriter, r *http.Request) {
	var req directRequest
	if !readJSON(w, r, "direct", &req) {
		return
	}
	info, _ := r.Context().Value(sessionKey{}).(*sessionInfo)
	if info == nil || info.direct {
		writeError(w, "direct", "", fmt.Errorf("%w: direct connections are asked for over the attached stream", errors.ErrUnsupported))
		return
	}
	token, err := hex.DecodeString(req.Token)
	if err != nil || len(token) != directTokenLen {
		writeError(w, "direct", "", fmt.Errorf("%w: want a token of %d bytes in hex", errInvalid, directTokenLen))
		return
	}
	info.mu.Lock()
	defer info.mu.Unlock()
	if info.listen == nil {
		dl, err := s.listenDirect(info.ctx, token)
		if err != nil {
			writeError(w, "direct", "", err)
			return
		}
		info.listen = dl
	} else if subtle.ConstantTimeCompare(info.listen.token, token) != 1 {
		writeError(w, "direct", "", fmt.Errorf("%w: this session's agent already listens, for another token", errInvalid))
		return
	}
	_, port, _ := net.SplitHostPort(info.listen.l.Addr().String())
	n, _ := strconv.Atoi(port)
	writeJSON(w, directAnswer{Port: n, CertSHA256: hex.EncodeToString(info.listen.sum[:])})
}

// listenDirect starts a listener that lives as long as ctx (the attached
// session's).
func (s *Server) listenDirect(ctx context.Context, token []byte) (*directListener, error) {
	cert, sum, err := selfSigned()
	if err != nil {
		return nil, fmt.Errorf("making the direct connection's certificate: %w", err)
	}
	// Every address of the sandbox: the agent cannot know which one the
	// client reaches. Who connects gets nothing without the token.
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, fmt.Errorf("listening for direct connections: %w", err)
	}
	dl := &directListener{
		l:     l,
		token: token,
		sum:   sum,
		tls: &tls.Config{
			Certificates:           []tls.Certificate{cert},
			MinVersion:             tls.VersionTLS13,
			SessionTicketsDisabled: true,
		},
		pending: make(chan struct{}, directPending),
	}
	context.AfterFunc(ctx, func() { l.Close() })
	go s.acceptDirect(ctx, dl)
	return dl, nil
}

func (s *Server) acceptDirect(ctx context.Context, dl *directListener) {
	for {
		conn, err := dl.l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("direct connections: accept failed; the client uses the attached stream", "err", err)
			}
			return
		}
		select {
		case dl.pending <- struct{}{}:
		default:
			conn.Close() // too many unauthenticated ones at once
			continue
		}
		go func() {
			tc, ok := dl.authenticate(ctx, conn)
			<-dl.pending
			if !ok {
				s.log.Warn("refused a direct connection: no TLS or a wrong token", "from", conn.RemoteAddr().String())
				conn.Close()
				return
			}
			if err := s.serve(ctx, tc, true); err != nil {
				s.log.Warn("serving a direct connection", "err", err)
			}
		}()
	}
}

// authenticate runs the TLS handshake and checks the token.
func (dl *directListener) authenticate(ctx context.Context, conn net.Conn) (*tls.Conn, bool) {
	conn.SetDeadline(time.Now().Add(directAuthTimeout))
	tc := tls.Server(conn, dl.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, false
	}
	got := make([]byte, directTokenLen)
	if _, err := io.ReadFull(tc, got); err != nil || subtle.ConstantTimeCompare(got, dl.token) != 1 {
		return nil, false
	}
	conn.SetDeadline(time.Time{})
	return tc, true
}

// selfSigned makes a key pair and a certificate for it, and the
// certificate's SHA-256. Clients pin the certificate itself, so its names
// and dates do not matter; an Ed25519 key is made in microseconds.
func selfSigned() (tls.Certificate, [sha256.Size]byte, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, [sha256.Size]byte{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, [sha256.Size]byte{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "sbxd"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return tls.Certificate{}, [sha256.Size]byte{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, sha256.Sum256(der), nil
}
