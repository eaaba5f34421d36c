package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	realSecret  = "REAL-SECRET-7f3a"
	placeholder = "sbx-placeholder-token-9c1e"
)

// seen is what the real server received.
type seen struct {
	mu       sync.Mutex
	reqs     []*http.Request
	brokered []Brokered    // what the broker reported of them
	next     chan struct{} // /stream sends its second event after it
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
}

func (s *seen) last(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the real server got no request")
	}
	return s.reqs[len(s.reqs)-1]
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// brokerSetup starts a real HTTPS server for example.com (httptest's
// certificate), a broker of creds in front of it (trusting that server),
// and returns a client that trusts the broker's CA and reaches the broker
// as the sandbox would.
func brokerSetup(t *testing.T, rootCAs *x509.CertPool, creds ...*Credential) (*http.Client, *seen, *[]Denial) {
	t.Helper()
	got := &seen{next: make(chan struct{}, 1)}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		if r.URL.Path == "/stream" {
			// Server-sent events: the second only once the client has
			// read the first.
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			http.NewResponseController(w).Flush()
			select {
			case <-got.next:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "data: two\n\n")
			return
		}
		if r.URL.Path == "/echo" {
			// An API that echoes what it got, in two flushed halves that
			// split the value, gzipped when the client takes it.
			var out io.Writer = w
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				w.Header().Set("Content-Encoding", "gzip")
				zw := gzip.NewWriter(w)
				defer zw.Close()
				out = zw
			}
			a := "you sent: " + r.Header.Get("Authorization") + "."
			half := len(a) - len(realSecret)/2 - 1
			io.WriteString(out, a[:half])
			if zw, ok := out.(*gzip.Writer); ok {
				zw.Flush()
			}
			http.NewResponseController(w).Flush()
			io.WriteString(out, a[half:])
			return
		}
		io.WriteString(w, "hello from "+r.Host+r.URL.Path)
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	t.Cleanup(up.Close)
	if rootCAs == nil {
		rootCAs = x509.NewCertPool()
		rootCAs.AddCert(up.Certificate())
	}
	dst := netip.MustParseAddrPort(up.Listener.Addr().String())

	ca, err := NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	var denials []Denial
	var dmu sync.Mutex
	b, err := NewBroker(ca, creds, BrokerOptions{RootCAs: rootCAs, Deny: func(d Denial) {
		dmu.Lock()
		denials = append(denials, d)
		dmu.Unlock()
	}, Brokered: func(r Brokered) {
		got.mu.Lock()
		got.brokered = append(got.brokered, r)
		got.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// The enforcer has peeked the SNI; here the test knows it.
			go b.ServeConn(c, nil, "example.com", dst)
		}
	}()
	trust := x509.NewCertPool()
	if !trust.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("the CA's PEM does not parse")
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, l.Addr().String())
		},
		TLSClientConfig:   &tls.Config{RootCAs: trust},
		ForceAttemptHTTP2: true,
	}}
	t.Cleanup(client.CloseIdleConnections)
	return client, got, &denials
}

func bearer() *Credential {
	c := &Credential{Name: "api", Hosts: []Rule{mustRule("example.com")}, Header: "Authorization", Format: "Bearer {value}", Placeholder: placeholder}
	c.SetValue(realSecret)
	return c
}

func mustRule(s string) Rule {
	r, err := ParseRule(s)
	if err != nil {
		panic(err)
	}
	return r
}

func do(t *testing.T, c *http.Client, method, url, host string, h map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// The placeholder the sandbox sends becomes the value on the way out, or
// the header is added; the sandbox sees neither the value in the answer's
// headers nor anything but the broker's certificate; every request of a
// kept-alive HTTP/2 connection is checked, so a request for another host
// on it is refused and the real server never sees it.
func TestBrokerHeader(t *testing.T) {
	client, got, denials := brokerSetup(t, nil, bearer())

	resp, body := do(t, client, "GET", "https://example.com/v1/models", "", map[string]string{"Authorization": "Bearer " + placeholder})
	if resp.StatusCode != 200 || body != "hello from example.com/v1/models" {
		t.Fatalf("answer %d %q", resp.StatusCode, body)
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("the sandbox's side spoke HTTP/%d, want 2 (h2 offered)", resp.ProtoMajor)
	}
	if a := got.last(t).Header.Get("Authorization"); a != "Bearer "+realSecret {
		t.Errorf("the real server got Authorization %q, want the value", a)
	}
	if e := resp.Header.Get("X-Echo"); strings.Contains(e, realSecret) || e != "Bearer "+placeholder {
		t.Errorf("the value came back in the answer's headers: X-Echo %q", e)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "sandboxkit credential broker of sandbox test" {
		t.Errorf("the sandbox did not talk to the broker's certificate")
	}

	// No header: added.
	do(t, client, "GET", "https://example.com/x", "", nil)
	if a := got.last(t).Header.Get("Authorization"); a != "Bearer "+realSecret {
		t.Errorf("without a header the real server got %q", a)
	}
	// Another value than the placeholder is the sandbox's own: left alone.
	do(t, client, "GET", "https://example.com/x", "", map[string]string{"Authorization": "Bearer mine"})
	if a := got.last(t).Header.Get("Authorization"); a != "Bearer mine" {
		t.Errorf("the sandbox's own header became %q", a)
	}

	// The same (pooled) connection, another host.
	before := got.count()
	resp, body = do(t, client, "GET", "https://example.com/steal", "attacker.test", map[string]string{"Authorization": "Bearer " + placeholder})
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a request for attacker.test on example.com's connection: %d %q, want 421", resp.StatusCode, body)
	}
	if got.count() != before {
		t.Errorf("the real server got the misdirected request")
	}
	if len(*denials) != 1 || (*denials)[0].Name != "attacker.test" {
		t.Errorf("denials %+v, want the misdirected request", *denials)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if len(got.brokered) != 3 {
		t.Fatalf("brokered records %+v, want the three requests that carried the credential", got.brokered)
	}
	if r := got.brokered[0]; r.Method != "GET" || r.Path != "/v1/models" || r.Status != 200 || r.Name != "example.com" || len(r.Credentials) != 1 || r.Credentials[0] != "api" {
		t.Errorf("brokered record %+v", r)
	}
}

// An answer that echoes the value (in its headers or body, split across
// writes, compressed or not, over HTTP/2 and HTTP/1.1) reaches the sandbox
// with the placeholder in its stead.
func TestBrokerMasksEchoes(t *testing.T) {
	basic := &Credential{Name: "basic", Hosts: []Rule{mustRule("example.com")}, BasicUser: "u", Placeholder: "sbx-placeholder-basic-1"}
	basic.SetValue("BASIC-SECRET-55")
	for _, h2 := range []bool{true, false} {
		client, got, _ := brokerSetup(t, nil, bearer())
		if !h2 {
			client.Transport.(*http.Transport).ForceAttemptHTTP2 = false
			client.Transport.(*http.Transport).TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		for _, enc := range []string{"", "gzip"} {
			h := map[string]string{"Authorization": "Bearer " + placeholder}
			if enc != "" {
				h["Accept-Encoding"] = enc // asked for by the sandbox's client itself
			}
			resp, body := do(t, client, "GET", "https://example.com/echo", "", h)
			if got.last(t).Header.Get("Authorization") != "Bearer "+realSecret {
				t.Fatalf("the server did not get the value")
			}
			if resp.StatusCode != 200 || body != "you sent: Bearer "+placeholder+"." {
				t.Errorf("h2 %v, Accept-Encoding %q: the echo reached the sandbox as %d %q", h2, enc, resp.StatusCode, body)
			}
		}
	}
	client, got, _ := brokerSetup(t, nil, basic)
	_, body := do(t, client, "GET", "https://example.com/x", "", nil)
	user, pass, _ := got.last(t).BasicAuth()
	if user != "u" || pass != "BASIC-SECRET-55" || body != "hello from example.com/x" {
		t.Fatalf("basic auth: the server got %q:%q", user, pass)
	}
	resp, _ := do(t, client, "GET", "https://example.com/x", "", nil)
	if e := resp.Header.Get("X-Echo"); strings.Contains(e, base64.StdEncoding.EncodeToString([]byte("u:BASIC-SECRET-55"))) ||
		e != "Basic "+base64.StdEncoding.EncodeToString([]byte("u:sbx-placeholder-basic-1")) {
		t.Errorf("basic auth's encoded value echoed as %q", e)
	}
}

// A streamed answer's events reach the sandbox as they come: the second
// event is sent only once the client has read the first, so a broker that
// held the first back would never see the second.
func TestBrokerStreams(t *testing.T) {
	client, got, _ := brokerSetup(t, nil, bearer())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://example.com/stream", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	if err != nil || first != "data: one\n" {
		t.Fatalf("the first event: %q, %v (held back by the broker?)", first, err)
	}
	got.next <- struct{}{}
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Fatalf("the rest: %q, %v", rest, err)
	}
}

// maskWriter, whatever the chunking, writes what replacing every secret
// in the whole input would give.
func FuzzMaskWriter(f *testing.F) {
	f.Add([]byte("a REAL-SECRET-7f3a b REAL-SECRET-7f3a"), uint8(3))
	f.Add([]byte("REAL-SECRET-7fREAL-SECRET-7f3a"), uint8(1))
	f.Add([]byte("REAL-SECRET-7f3REAL"), uint8(7))
	f.Add([]byte("xxREALREAL-SECRET-7f3a"), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		pairs := []maskPair{{secret: []byte(realSecret), mask: []byte("<P>")}, {secret: []byte("REAL"), mask: []byte("<R>")}}
		var out bytes.Buffer
		m := newMaskWriter(&out, pairs)
		step := int(chunk%16) + 1
		for i := 0; i < len(in); i += step {
			if n, err := m.Write(in[i:min(i+step, len(in))]); err != nil || n != min(step, len(in)-i) {
				t.Fatalf("Write: %d, %v", n, err)
			}
		}
		m.Close()
		// The reference: leftmost match, the longer secret first at a tie.
		want := strings.NewReplacer(realSecret, "<P>", "REAL", "<R>").Replace(string(in))
		if out.String() != want {
			t.Fatalf("chunks of %d: %q, want %q", step, out.String(), want)
		}
	})
}

// The same checks over HTTP/1.1 keep-alive.
func TestBrokerHTTP1KeepAlive(t *testing.T) {
	client, got, _ := brokerSetup(t, nil, bearer())
	client.Transport.(*http.Transport).ForceAttemptHTTP2 = false
	client.Transport.(*http.Transport).TLSClientConfig.NextProtos = []string{"http/1.1"}
	resp, _ := do(t, client, "GET", "https://example.com/a", "", nil)
	if resp.ProtoMajor != 1 {
		t.Fatalf("HTTP/%d, want 1.1", resp.ProtoMajor)
	}
	before := got.count()
	resp, _ = do(t, client, "GET", "https://example.com/b", "attacker.test:443", nil)
	if resp.StatusCode != http.StatusMisdirectedRequest || got.count() != before {
		t.Errorf("misdirected on a kept-alive HTTP/1.1 connection: %d, real server requests %d -> %d", resp.StatusCode, before, got.count())
	}
	resp, _ = do(t, client, "GET", "https://example.com/c", "", nil)
	if resp.StatusCode != 200 || got.last(t).Header.Get("Authorization") != "Bearer "+realSecret {
		t.Errorf("after the refusal: %d, %q", resp.StatusCode, got.last(t).Header.Get("Authorization"))
	}
}

// A real server the host does not trust gets nothing: the broker's own
// TLS fails before any request is sent.
func TestBrokerVerifiesTheRealServer(t *testing.T) {
	client, got, _ := brokerSetup(t, x509.NewCertPool(), bearer())
	resp, body := do(t, client, "GET", "https://example.com/", "", nil)
	if resp.StatusCode != http.StatusBadGateway || got.count() != 0 {
		t.Errorf("an untrusted real server: %d %q, it got %d requests", resp.StatusCode, body, got.count())
	}
	if strings.Contains(body, realSecret) {
		t.Errorf("the error shows the value: %q", body)
	}
}

// Rotation, a query parameter, basic auth.
func TestBrokerForms(t *testing.T) {
	api := bearer()
	q := &Credential{Name: "q", Hosts: []Rule{mustRule("example.com:443-65535")}, Query: "key", Placeholder: "PH-Q"}
	q.SetValue("QV")
	client, got, _ := brokerSetup(t, nil, api, q)
	do(t, client, "GET", "https://example.com/s?key=PH-Q&x=1", "", nil)
	if k := got.last(t).URL.Query().Get("key"); k != "QV" {
		t.Errorf("query key %q, want the value", k)
	}
	api.SetValue("ROTATED")
	do(t, client, "GET", "https://example.com/s", "", nil)
	if a := got.last(t).Header.Get("Authorization"); a != "Bearer ROTATED" {
		t.Errorf("after rotation %q", a)
	}

	basic := &Credential{Name: "b", Hosts: []Rule{mustRule("*.com")}, BasicUser: "ci", Placeholder: "PH-B"}
	basic.SetValue("BV")
	client, got, _ = brokerSetup(t, nil, basic)
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	req.SetBasicAuth("ci", "PH-B")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if u, p, ok := got.last(t).BasicAuth(); !ok || u != "ci" || p != "BV" {
		t.Errorf("basic auth %q %q %v", u, p, ok)
	}
}

// Bad declarations are refused, naming the credential and what is wrong.
func TestCredentialCheck(t *testing.T) {
	for _, c := range []struct {
		cred *Credential
		want string
	}{
		{&Credential{Name: "a", Hosts: []Rule{mustRule("x.test")}, Header: "Bad Header"}, `header "Bad Header" is not an HTTP header name`},
		{&Credential{Name: "a", Hosts: []Rule{mustRule("10.0.0.1")}, Header: "X-Key"}, `host "10.0.0.1" is an address`},
		{&Credential{Name: "a", Hosts: []Rule{mustRule("x.test")}, Header: "X-Key", Query: "k"}, "exactly one of header, query and basic_user"},
		{&Credential{Name: "a", Header: "X-Key"}, "hosts is empty"},
		{&Credential{Name: "a", Hosts: []Rule{mustRule("x.test")}, Header: "X-Key", Format: "Bearer"}, "does not hold {value}"},
	} {
		err := c.cred.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "credential a") {
			t.Errorf("%v: %v, want %q", c.want, err, c.want)
		}
	}
	good := bearer()
	if !newTestBroker(t, good).Wants("EXAMPLE.com.", 443) || newTestBroker(t, good).Wants("example.org", 443) {
		t.Error("Wants does not follow the credential's hosts")
	}
}

// brokeringEnforcer starts a real HTTPS server serving handler, whose
// certificate (of realCA, which the host trusts) is for web.test and
// keep.test, and an enforcer whose policy allows both and whose broker
// gives cred to web.test, with certificates of sandboxCA; it returns the
// enforcer and the address of its proxy, to which every connection counts
// as one to the server.
func brokeringEnforcer(tb testing.TB, handler http.Handler, cred *Credential) (te *testEnforcer, proxy string, sandboxCA, realCA *CA) {
	tb.Helper()
	realCA, err := NewCA("real")
	if err != nil {
		tb.Fatal(err)
	}
	up := httptest.NewUnstartedServer(handler)
	webCert, _ := realCA.leaf("web.test")
	keepCert, _ := realCA.leaf("keep.test")
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*webCert, *keepCert}}
	up.StartTLS()
	tb.Cleanup(up.Close)
	hostTrust := x509.NewCertPool()
	hostTrust.AppendCertsFromPEM(realCA.CertPEM())

	zone := proxyZone(tb)
	te = startEnforcer(tb, mustPolicy(tb, Deny, []string{"web.test", "keep.test"}, nil), zone.addr)
	te.resolve(tb, "web.test")
	te.resolve(tb, "keep.test")
	if sandboxCA, err = NewCA("sb"); err != nil {
		tb.Fatal(err)
	}
	if err := te.SetCredentials(sandboxCA, []*Credential{cred}, hostTrust); err != nil {
		tb.Fatal(err)
	}
	return te, te.startProxy(tb, serverAddr(up)), sandboxCA, realCA
}

// proxyClient is an HTTPS client whose every connection goes to proxy,
// trusting the certificates of trust.
func proxyClient(proxy string, keepAlive bool, trust ...*CA) *http.Client {
	pool := x509.NewCertPool()
	for _, ca := range trust {
		pool.AppendCertsFromPEM(ca.CertPEM())
	}
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "tcp", proxy) },
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: !keepAlive,
	}}
}

func newTestBroker(t *testing.T, creds ...*Credential) *Broker {
	ca, err := NewCA("t")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBroker(ca, creds, BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The enforcer hands a connection the policy lets through to a host a
// credential goes to to its broker: the sandbox talks TLS with the
// sandbox's CA and the real server gets the value; a host no credential
// goes to is spliced as before (the sandbox sees the real server's
// certificate, and nothing is added).
func TestEnforcerBrokers(t *testing.T) {
	got := &seen{}
	cred := &Credential{Name: "api", Hosts: []Rule{mustRule("web.test")}, Header: "X-Api-Key", Placeholder: placeholder}
	cred.SetValue(realSecret)
	te, proxy, sandboxCA, realCA := brokeringEnforcer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.add(r)
		io.WriteString(w, "hello "+r.Host)
	}), cred)
	client := func(trust *CA) *http.Client { return proxyClient(proxy, true, trust) }

	resp, body := do(t, client(sandboxCA), "GET", "https://web.test/", "", map[string]string{"X-Api-Key": placeholder})
	if resp.StatusCode != 200 || body != "hello web.test" {
		t.Fatalf("web.test through the broker: %d %q", resp.StatusCode, body)
	}
	if k := got.last(t).Header.Get("X-Api-Key"); k != realSecret {
		t.Errorf("the real server got X-Api-Key %q, want the value", k)
	}

	// keep.test: no credential, spliced; the sandbox's CA would not do.
	resp, body = do(t, client(realCA), "GET", "https://keep.test/", "", map[string]string{"X-Api-Key": placeholder})
	if resp.StatusCode != 200 || body != "hello keep.test" {
		t.Fatalf("keep.test spliced: %d %q", resp.StatusCode, body)
	}
	if k := got.last(t).Header.Get("X-Api-Key"); k != placeholder {
		t.Errorf("keep.test got X-Api-Key %q: a host no credential goes to was given one", k)
	}
	if _, err := client(sandboxCA).Get("https://keep.test/"); err == nil {
		t.Error("keep.test's connection was ended by the broker (the sandbox's CA was accepted)")
	}
	te.denials.none(t)
}
