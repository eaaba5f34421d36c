// Package agenttls lets a client reach a sandbox's agent (sbxd) straight
// over the network, without a platform's exec stream in between: the
// agent listens on TCP with TLS, on a certificate made for that one
// sandbox and pinned by the client that made it, and takes a connection
// only after the client sent the sandbox's token. The client hands the
// agent its credentials as one line (Creds.Line) through a channel it
// already trusts (the k8s backend writes it into the pod over the API
// server's exec, readable by root only); nothing of it is stored where a
// reader of the platform's objects would see it.
package agenttls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"time"
)

// Port is where an agent with credentials listens, in the sandbox's own
// network namespace.
const Port = 39917

// serverName is the name in every agent's certificate; the pinned
// certificate, not the name, is what the client checks.
const serverName = "sbxd.sandboxkit.invalid"

// lineVersion starts a credentials line.
const lineVersion = "sbxd-tls1"

// tokenTimeout bounds the TLS handshake and the token of one connection.
var tokenTimeout = 10 * time.Second

// Creds are one sandbox's agent credentials: its token, certificate and
// key (PEM).
type Creds struct {
	Token   string
	CertPEM []byte
	KeyPEM  []byte
}

// New makes credentials for one sandbox: a P-256 key, a self-signed
// certificate valid for ten years, and a 256-bit token.
func New() (*Creds, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: serverName},
		DNSNames:     []string{serverName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	var tok [32]byte
	rand.Read(tok[:])
	return &Creds{
		Token:   hex.EncodeToString(tok[:]),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Line is c as one line of text (no newline): what the agent reads.
func (c *Creds) Line() string {
	enc := base64.StdEncoding.EncodeToString
	return strings.Join([]string{lineVersion, c.Token, enc(c.CertPEM), enc(c.KeyPEM)}, " ")
}

// Parse reads a line Line made.
func Parse(line string) (*Creds, error) {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != lineVersion {
		return nil, fmt.Errorf("agent credentials: not a %s line", lineVersion)
	}
	cert, err1 := base64.StdEncoding.DecodeString(f[2])
	key, err2 := base64.StdEncoding.DecodeString(f[3])
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("agent credentials: %w", err)
	}
	if len(f[1]) != 64 {
		return nil, errors.New("agent credentials: the token is not 64 hex digits")
	}
	return &Creds{Token: f[1], CertPEM: cert, KeyPEM: key}, nil
}

// Listen listens on addr with TLS on c's certificate. Its Accept returns
// connections whose client sent c's token, the token read; others are
// closed unanswered.
func Listen(addr string, c *Creds) (net.Listener, error) {
	cert, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("agent credentials: %w", err)
	}
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &listener{
		inner: inner,
		cfg:   &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13},
		token: []byte(c.Token + "\n"),
		conns: make(chan net.Conn),
		done:  make(chan struct{}),
	}
	go l.run()
	return l, nil
}

type listener struct {
	inner net.Listener
	cfg   *tls.Config
	token []byte
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error // why run stopped, if it did first; set before done closes
}

func (l *listener) run() {
	for {
		nc, err := l.inner.Accept()
		if err != nil {
			l.once.Do(func() { l.err = err; close(l.done) })
			l.inner.Close()
			return
		}
		go l.admit(nc)
	}
}

// admit checks one connection's handshake and token within tokenTimeout.
func (l *listener) admit(nc net.Conn) {
	nc.SetDeadline(time.Now().Add(tokenTimeout))
	tc := tls.Server(nc, l.cfg)
	got := make([]byte, len(l.token))
	if err := tc.Handshake(); err != nil {
		nc.Close()
		return
	}
	// The TLS connection keeps what follows the token for the agent.
	if _, err := io.ReadFull(tc, got); err != nil || subtle.ConstantTimeCompare(got, l.token) != 1 {
		tc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	select {
	case l.conns <- tc:
	case <-l.done:
		tc.Close()
	}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.inner.Close()
}

func (l *listener) Addr() net.Addr { return l.inner.Addr() }

// Dial connects to the agent at addr, checks that it holds c's
// certificate, and sends c's token.
func Dial(ctx context.Context, addr string, c *Creds) (net.Conn, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.CertPEM) {
		return nil, errors.New("agent credentials: no certificate")
	}
	d := tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS13}}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetWriteDeadline(dl)
	}
	if _, err := nc.Write([]byte(c.Token + "\n")); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetWriteDeadline(time.Time{})
	return nc, nil
}
