package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
)

// Brokered credentials: a secret the sandbox never holds, added by the
// enforcer to the HTTPS requests that may carry it. For a declared host
// the enforcer ends the sandbox's TLS with a certificate of a certificate
// authority made for the sandbox (its key stays outside), checks every
// request of the connection (each HTTP/1.1 request of a kept-alive
// connection and each HTTP/2 stream) against the name the connection was
// let through for, and forwards it over TLS of its own, verified against
// the host's trust store, with the credential applied: a placeholder the
// sandbox was given is replaced by the value, or the header is added.

// CA is a sandbox's certificate authority: the sandbox trusts its
// certificate; its key never leaves the enforcer.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by name
}

// NewCA makes a certificate authority named for sandbox id.
func NewCA(id string) (*CA, error) {
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
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sandboxkit credential broker of sandbox " + id, Organization: []string{"sandboxkit"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

// LoadCA reads a CA that NewCA made (CertPEM and KeyPEM), such as the one
// a sandbox's enforcer is started with.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("egress: the CA's certificate or key is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress: the CA's certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress: the CA's key: %w", err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("egress: the CA's key does not match its certificate, or the certificate is no CA's")
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(cb), leaves: map[string]*tls.Certificate{}}, nil
}

// KeyPEM is the CA's private key, for the enforcer alone (never the
// sandbox).
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// Validity of the CA and of the certificates it makes for names.
const (
	caValidity   = 400 * 24 * time.Hour
	leafValidity = 30 * 24 * time.Hour
)

// CertPEM is the CA's certificate, for the sandbox's trust store.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// leaf returns a certificate for name, made once and kept.
func (ca *CA) leaf(name string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[name]; c != nil && time.Until(c.Leaf.NotAfter) > time.Hour {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
	ca.leaves[name] = c
	return c, nil
}

// Credential is one brokered secret of a sandbox.
type Credential struct {
	// Name names it in errors and denials (its config key).
	Name string
	// Hosts are the egress rules of the hosts that get it (names,
	// wildcards, ports).
	Hosts []Rule
	// Where the value goes: Header (Format's "{value}" replaced by it;
	// default "{value}"), Query (a query parameter), or BasicUser (HTTP
	// basic auth with this user and the value as password).
	Header, Format, Query, BasicUser string
	// Placeholder is what the sandbox was given in its stead: replaced
	// by the value where the request carries it.
	Placeholder string

	mu    sync.RWMutex
	value string
}

// SetValue sets (or rotates) the credential's value.
func (c *Credential) SetValue(v string) {
	c.mu.Lock()
	c.value = v
	c.mu.Unlock()
}

func (c *Credential) current() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.value
}

// Check reports what is wrong with the credential's declaration.
func (c *Credential) Check() error {
	n := 0
	for _, set := range []bool{c.Header != "", c.Query != "", c.BasicUser != ""} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return fmt.Errorf("credential %s: give exactly one of header, query and basic_user", c.Name)
	case len(c.Hosts) == 0:
		return fmt.Errorf("credential %s: hosts is empty: name the hosts that get it", c.Name)
	case c.Header != "" && !httpguts.ValidHeaderFieldName(c.Header):
		return fmt.Errorf("credential %s: header %q is not an HTTP header name (a token: letters, digits and !#$%%&'*+-.^_`|~)", c.Name, c.Header)
	case c.Format != "" && !strings.Contains(c.Format, "{value}"):
		return fmt.Errorf("credential %s: format %q does not hold {value}", c.Name, c.Format)
	}
	for _, h := range c.Hosts {
		if h.Domain == "" {
			return fmt.Errorf("credential %s: host %q is an address: credentials go to names (TLS certificates are for names)", c.Name, h.Text)
		}
	}
	return nil
}

// matches reports whether the credential goes to name:port.
func (c *Credential) matches(name string, port uint16) bool {
	for _, h := range c.Hosts {
		if h.matchesName(name, port) {
			return true
		}
	}
	return false
}

// apply puts the credential's value into r (a request to a host it goes
// to) and returns the value.
func (c *Credential) apply(r *http.Request) string {
	v := c.current()
	switch {
	case c.Header != "":
		full := strings.ReplaceAll(cmpOr(c.Format, "{value}"), "{value}", v)
		got := r.Header.Values(c.Header)
		if len(got) == 0 {
			r.Header.Set(c.Header, full)
			return v
		}
		for i, h := range got {
			if c.Placeholder != "" && strings.Contains(h, c.Placeholder) {
				got[i] = strings.ReplaceAll(h, c.Placeholder, v)
			}
		}
		r.Header[http.CanonicalHeaderKey(c.Header)] = got
	case c.Query != "":
		q := r.URL.Query()
		if cur := q.Get(c.Query); cur == "" || (c.Placeholder != "" && cur == c.Placeholder) {
			q.Set(c.Query, v)
			r.URL.RawQuery = q.Encode()
		}
	case c.BasicUser != "":
		user, pass, ok := r.BasicAuth()
		if !ok || (c.Placeholder != "" && pass == c.Placeholder && user == c.BasicUser) {
			r.SetBasicAuth(c.BasicUser, v)
		}
	}
	return v
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Broker applies a sandbox's credentials.
type Broker struct {
	ca    *CA
	creds []*Credential
	opts  BrokerOptions
	tr    *http.Transport
}

// BrokerOptions tune a Broker.
type BrokerOptions struct {
	// RootCAs verify the real servers (nil: the host's trust store).
	RootCAs *x509.CertPool
	// Dial connects to a destination the policy let through (default
	// net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Deny records a refused request (optional).
	Deny func(Denial)
	// Brokered records a request that carried credentials (optional).
	Brokered func(Brokered)
}

// Brokered is a request to a declared host that carried credentials: what
// the audit records of it (never the values, nor the query, which may
// hold one).
type Brokered struct {
	Time        time.Time
	Dest        string // the address the connection was let through to
	Port        uint16
	Name        string // the host (the connection's TLS name)
	Method      string
	Path        string // without its query
	Status      int    // the server's answer; 502 when it was not reached
	Credentials []string
}

// NewBroker returns a broker of creds, whose certificates ca makes.
func NewBroker(ca *CA, creds []*Credential, opts BrokerOptions) (*Broker, error) {
	for _, c := range creds {
		if err := c.Check(); err != nil {
			return nil, err
		}
	}
	if opts.Dial == nil {
		var d net.Dialer
		opts.Dial = d.DialContext
	}
	b := &Broker{ca: ca, creds: creds, opts: opts}
	b.tr = &http.Transport{
		// Dialled to the destination the sandbox's connection was let
		// through for (in the request's context), TLS verified for the
		// name; one pool of connections per name:port.
		Proxy:               nil,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     &tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			ap, _ := ctx.Value(upstreamKey{}).(netip.AddrPort)
			if !ap.IsValid() {
				return nil, errors.New("credential broker: a request without its destination")
			}
			return opts.Dial(ctx, network, ap.String())
		},
	}
	return b, nil
}

// Close lets go of the broker's connections to real servers.
func (b *Broker) Close() { b.tr.CloseIdleConnections() }

// Wants reports whether a TLS connection to name:port is the broker's
// (some credential goes there).
func (b *Broker) Wants(name string, port uint16) bool {
	name = normalizeName(name)
	for _, c := range b.creds {
		if c.matches(name, port) {
			return true
		}
	}
	return false
}

// wantsPort reports whether some credential could go to a host on port
// (the proxy then reads every connection's name on it).
func (b *Broker) wantsPort(port uint16) bool {
	for _, c := range b.creds {
		for _, h := range c.Hosts {
			if h.coversPort(port) {
				return true
			}
		}
	}
	return false
}

// isTLSRecord reports whether head starts a TLS handshake record.
func isTLSRecord(head []byte) bool { return len(head) > 0 && head[0] == 0x16 }

// upstreamKey carries, in a request's context, where its connection was
// let through to.
type upstreamKey struct{}

// ServeConn serves client, a connection the policy let through to dst for
// name (its TLS SNI), whose first bytes (head) were read already: it ends
// the TLS, and forwards each request for name with the credentials that go
// there.
func (b *Broker) ServeConn(client net.Conn, head []byte, name string, dst netip.AddrPort) {
	name = normalizeName(name)
	conn := &replayConn{Conn: client, head: head}
	cert, err := b.ca.leaf(name)
	if err != nil {
		client.Close()
		return
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { b.forward(w, r, name, dst) }),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
		// ServeTLS ends the TLS and speaks HTTP/2 to clients that offer it.
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{*cert},
			NextProtos:   []string{"h2", "http/1.1"},
			MinVersion:   tls.VersionTLS12,
		},
	}
	srv.ServeTLS(&oneConnListener{conn: conn, done: make(chan struct{})}, "", "")
}

// forward sends r on to name at dst, with the credentials that go there.
func (b *Broker) forward(w http.ResponseWriter, r *http.Request, name string, dst netip.AddrPort) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if normalizeName(host) != name {
		// A request for another host on a connection let through for
		// name: the credential must not go with it, and the policy did
		// not decide it.
		b.deny(Denial{Proto: "tcp", Dest: dst.Addr().String(), Port: dst.Port(), Name: host,
			Reason: fmt.Sprintf("a request for %s on a connection opened for %s (credential broker)", host, name)})
		http.Error(w, fmt.Sprintf("this connection is for %s; open another for %s", name, host), http.StatusMisdirectedRequest)
		return
	}
	out := r.Clone(context.WithValue(r.Context(), upstreamKey{}, dst))
	out.RequestURI = ""
	out.URL.Scheme = "https"
	out.URL.Host = net.JoinHostPort(name, strconv.Itoa(int(dst.Port())))
	out.Host = r.Host
	removeHopHeaders(out.Header)
	// The transport asks for gzip itself and undoes it, so that answers
	// are masked in the clear (an encoding the sandbox asked for would
	// hide an echoed value from the mask).
	out.Header.Del("Accept-Encoding")
	var masks []maskPair
	var applied []string
	for _, c := range b.creds {
		if c.matches(name, dst.Port()) {
			v := c.apply(out)
			masks = append(masks, c.masks(v)...)
			applied = append(applied, c.Name)
		}
	}
	resp, err := b.tr.RoundTrip(out)
	if err != nil {
		b.brokered(r, name, dst, applied, http.StatusBadGateway)
		http.Error(w, "the credential broker could not reach "+name+": "+maskString(err.Error(), masks), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, maskString(v, masks))
		}
	}
	// A masked body's length is not the server's.
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	b.brokered(r, name, dst, applied, resp.StatusCode)
	copyAnswer(w, resp.Body, masks)
}

// copyAnswer copies body to w masked. A goroutine reads the body while
// this one masks and writes, gathering what is ready into large writes
// and flushing whenever nothing more has been read: a streamed answer's
// events (server-sent events) reach the sandbox as they come, and a
// download goes in large writes (fewer TLS records and chunks).
func copyAnswer(w http.ResponseWriter, body io.Reader, masks []maskPair) {
	type chunk struct {
		b   *[]byte
		n   int
		err error
	}
	ready := make(chan chunk, 8)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			bp := answerBufs.Get().(*[]byte)
			n, err := body.Read(*bp)
			select {
			case ready <- chunk{b: bp, n: n, err: err}:
			case <-done:
				answerBufs.Put(bp)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	bw := bufio.NewWriterSize(w, 128<<10)
	mw := newMaskWriter(bw, masks)
	rc := http.NewResponseController(w)
	for c := range ready {
		_, werr := mw.Write((*c.b)[:c.n])
		answerBufs.Put(c.b)
		if werr != nil {
			return
		}
		if c.err != nil {
			break
		}
		if len(ready) == 0 {
			if bw.Flush() != nil {
				return
			}
			rc.Flush()
		}
	}
	mw.Close()
	bw.Flush()
	rc.Flush()
}

// answerBufs are copyAnswer's read buffers.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// brokered reports a request that carried credentials applied.
func (b *Broker) brokered(r *http.Request, name string, dst netip.AddrPort, applied []string, status int) {
	if b.opts.Brokered != nil {
		b.opts.Brokered(Brokered{Time: time.Now(), Dest: dst.Addr().String(), Port: dst.Port(), Name: name,
			Method: r.Method, Path: r.URL.Path, Status: status, Credentials: applied})
	}
}

func (b *Broker) deny(d Denial) {
	if b.opts.Deny != nil {
		d.Time = time.Now()
		b.opts.Deny(d)
	}
}

// maskString replaces every secret of masks in s by its mask.
func maskString(s string, masks []maskPair) string {
	for _, m := range masks {
		if len(m.secret) > 0 {
			s = strings.ReplaceAll(s, string(m.secret), string(m.mask))
		}
	}
	return s
}

// Hop-by-hop headers (RFC 9110 7.6.1), not forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// replayConn reads head before the connection's own bytes.
type replayConn struct {
	net.Conn
	head []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// oneConnListener hands out one connection, then waits until it is
// closed.
type oneConnListener struct {
	conn net.Conn
	once sync.Once
	done chan struct{}
	took bool
	mu   sync.Mutex
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.took {
		l.took = true
		l.mu.Unlock()
		return &closeNotifyConn{Conn: l.conn, closed: func() { l.once.Do(func() { close(l.done) }) }}, nil
	}
	l.mu.Unlock()
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

type closeNotifyConn struct {
	net.Conn
	closed func()
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.closed()
	return err
}

// PlaceholderFor returns a random placeholder for credential name: what the
// sandbox sees in its stead, meaningless outside.
func PlaceholderFor(name string) (string, error) {
	var b [18]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "sbx-placeholder-" + strings.ToLower(name) + "-" + fmt.Sprintf("%x", b[:]), nil
}
