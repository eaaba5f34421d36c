package fakenet

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

const (
	httpPort  = 80
	httpsPort = 443
	echoPort  = 7
	dnsPort   = 53

	maxBytes       = 4 << 30 // the largest /bytes?n=
	streamInterval = 100 * time.Millisecond
)

// payload is what /bytes sends, over and over; only read, so every
// response shares it.
var payload = func() []byte {
	b := make([]byte, 256<<10)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}()

// listeners are the sockets of the servers, made in the namespace.
type listeners struct {
	http, https []net.Listener
	echo        []*net.UDPConn
	dnsTCP      net.Listener
	dnsUDP      *net.UDPConn
}

func (ls *listeners) close() {
	for _, l := range append(ls.http, ls.https...) {
		l.Close()
	}
	for _, c := range ls.echo {
		c.Close()
	}
	if ls.dnsTCP != nil {
		ls.dnsTCP.Close()
	}
	if ls.dnsUDP != nil {
		ls.dnsUDP.Close()
	}
}

// listen binds every server's socket; it runs on a thread in the namespace.
func listen(n *Net) (_ *listeners, err error) {
	ls := &listeners{}
	defer func() {
		if err != nil {
			ls.close()
		}
	}()
	tcp := func(a netip.Addr, port uint16) (net.Listener, error) {
		return net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
	}
	udp := func(a netip.Addr, port uint16) (*net.UDPConn, error) {
		return net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
	}
	for _, name := range n.Names() {
		a := n.hosts[name]
		l, err := tcp(a, httpPort)
		if err != nil {
			return nil, err
		}
		ls.http = append(ls.http, l)
		if l, err = tcp(a, httpsPort); err != nil {
			return nil, err
		}
		ls.https = append(ls.https, l)
		c, err := udp(a, echoPort)
		if err != nil {
			return nil, err
		}
		ls.echo = append(ls.echo, c)
	}
	if ls.dnsTCP, err = tcp(n.DNS.Addr(), dnsPort); err != nil {
		return nil, err
	}
	if ls.dnsUDP, err = udp(n.DNS.Addr(), dnsPort); err != nil {
		return nil, err
	}
	return ls, nil
}

// serve runs the servers on ls for the rest of the process.
func serve(n *Net, c *certs, ls *listeners) {
	quiet := log.New(io.Discard, "", 0) // refused handshakes are what tests do
	plain := &http.Server{Handler: n.handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	tlsSrv := &http.Server{
		Handler:           n.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          quiet,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if cert, ok := c.byName[canonical(hello.ServerName)]; ok {
					return cert, nil
				}
				if cert, ok := c.byName[n.domainAt(hello.Conn.LocalAddr())]; ok {
					return cert, nil
				}
				return nil, fmt.Errorf("no certificate for %q", hello.ServerName)
			},
		},
	}
	for _, l := range ls.http {
		go plain.Serve(l)
	}
	for _, l := range ls.https {
		go tlsSrv.ServeTLS(l, "", "")
	}
	for _, c := range ls.echo {
		go echo(c)
	}
	go n.dns.serveUDP(ls.dnsUDP)
	go n.dns.serveTCP(ls.dnsTCP)
}

// domainAt is the test domain whose address a is ("" for none).
func (n *Net) domainAt(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return n.byAddr[ta.AddrPort().Addr().Unmap()]
	}
	return ""
}

// handler serves /, /header, /bytes and /stream, naming the domain whose address the
// connection arrived at.
func (n *Net) handler() http.Handler {
	domain := func(r *http.Request) string {
		a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		return n.domainAt(a)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "hello from "+domain(r)+"\n")
	})
	mux.HandleFunc("GET /header", func(w http.ResponseWriter, r *http.Request) {
		// The request's header ?name=, for the credential tests: what the
		// sandbox's request carried when it reached the server.
		// The answer echoes it, as some APIs do, so that the tests see what
		// of an echoed credential reaches the sandbox; Received tells what
		// the server itself got.
		name := r.URL.Query().Get("name")
		v := r.Header.Get(name)
		n.received.Store(http.CanonicalHeaderKey(name), v)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "header "+v+"\n")
	})
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		size, err := strconv.ParseUint(r.URL.Query().Get("n"), 10, 64)
		if err != nil || size > maxBytes {
			http.Error(w, "n: want a byte count from 0 to 4294967296", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatUint(size, 10))
		for size > 0 {
			chunk := payload[:min(size, uint64(len(payload)))]
			if _, err := w.Write(chunk); err != nil {
				return
			}
			size -= uint64(len(chunk))
		}
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rc := http.NewResponseController(w)
		tick := time.NewTicker(streamInterval)
		defer tick.Stop()
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "%d from %s\n", i, domain(r)); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	})
	return mux
}

// echo sends every datagram on c back to its sender.
func echo(c *net.UDPConn) {
	buf := make([]byte, 64<<10)
	for {
		k, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		c.WriteToUDPAddrPort(buf[:k], from)
	}
}
