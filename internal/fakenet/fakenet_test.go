package fakenet

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// clientTo returns an HTTP client that connects to addr whatever the URL's
// host (keeping its port) and trusts only the test CA: the URL's host is
// then only the Host header and SNI, which is how spoofing looks.
func clientTo(n *Net, addr netip.Addr) *http.Client {
	var d net.Dialer
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, hostport string) (net.Conn, error) {
				_, port, err := net.SplitHostPort(hostport)
				if err != nil {
					return nil, err
				}
				return d.DialContext(ctx, network, net.JoinHostPort(addr.String(), port))
			},
			TLSClientConfig: &tls.Config{RootCAs: n.CAPool},
		},
	}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// exchange sends one DNS query for name and type qtype to n.DNS over
// network ("udp" or "tcp") and returns the response.
func exchange(t *testing.T, n *Net, network, name string, qtype dnsmessage.Type) dnsmessage.Message {
	t.Helper()
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 0x5b5b, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET}},
	}
	req, err := q.Pack()
	require.NoError(t, err)
	c, err := net.DialTimeout(network, n.DNS.String(), 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	buf := make([]byte, 64<<10)
	var size int
	if network == "tcp" {
		_, err = c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(req))), req...))
		require.NoError(t, err)
		_, err = io.ReadFull(c, buf[:2])
		require.NoError(t, err)
		size = int(binary.BigEndian.Uint16(buf))
		_, err = io.ReadFull(c, buf[:size])
	} else {
		_, err = c.Write(req)
		require.NoError(t, err)
		size, err = c.Read(buf)
	}
	require.NoError(t, err)
	var resp dnsmessage.Message
	require.NoError(t, resp.Unpack(buf[:size]))
	require.Equal(t, q.Header.ID, resp.Header.ID)
	require.True(t, resp.Header.Response)
	return resp
}

func nsExists(name string) bool {
	_, err := os.Lstat(netnsDir + "/" + name)
	return err == nil
}

func TestStartReturnsTheSameNet(t *testing.T) {
	n := Start(t)
	require.Same(t, n, Start(t))
}

func TestAddresses(t *testing.T) {
	n := Start(t)
	require.Subset(t, n.Names(), []string{"allowed.test", "www.allowed.test", "api.allowed.test", "other.test", "denied.test", "tunnel.denied.test"})
	require.True(t, n.Prefix.Contains(n.HostAddr))
	require.True(t, n.Prefix.Contains(n.DNS.Addr()))
	require.True(t, netip.MustParsePrefix("10.251.0.0/16").Overlaps(n.Prefix))
	seen := map[netip.Addr]string{n.HostAddr: "host", n.DNS.Addr(): "dns"}
	for _, name := range n.Names() {
		a := n.Addr(name)
		require.True(t, n.Prefix.Contains(a), "%s at %s", name, a)
		require.NotContains(t, seen, a, "%s shares its address", name)
		seen[a] = name
	}
	require.Equal(t, n.Addr("allowed.test"), n.Addr("Allowed.Test."))
	require.PanicsWithValue(t,
		`fakenet: unknown test domain "nope.test" (known: `+strings.Join(n.Names(), ", ")+`)`,
		func() { n.Addr("nope.test") })
}

func TestDNSResolverUDPAndTCP(t *testing.T) {
	n := Start(t)
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			r := &net.Resolver{
				PreferGo: true,
				Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, n.DNS.String())
				},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, name := range n.Names() {
				addrs, err := r.LookupNetIP(ctx, "ip4", name)
				require.NoError(t, err, name)
				require.Equal(t, []netip.Addr{n.Addr(name)}, addrs, name)
			}
			_, err := r.LookupNetIP(ctx, "ip4", "nope.test")
			var dnsErr *net.DNSError
			require.ErrorAs(t, err, &dnsErr)
			require.True(t, dnsErr.IsNotFound, "%v", err)
		})
	}
}

func TestDNSAnswers(t *testing.T) {
	n := Start(t)
	soaOnly := func(t *testing.T, m dnsmessage.Message) {
		require.Empty(t, m.Answers)
		require.Len(t, m.Authorities, 1)
		require.Equal(t, dnsmessage.TypeSOA, m.Authorities[0].Header.Type)
	}
	cases := []struct {
		name   string
		qtype  dnsmessage.Type
		rcode  dnsmessage.RCode
		answer func(t *testing.T, m dnsmessage.Message)
	}{
		{"allowed.test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, func(t *testing.T, m dnsmessage.Message) {
			require.Len(t, m.Answers, 1)
			require.Equal(t, uint32(60), m.Answers[0].Header.TTL)
			require.Equal(t, n.Addr("allowed.test").As4(), m.Answers[0].Body.(*dnsmessage.AResource).A)
		}},
		{"WWW.Allowed.Test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, func(t *testing.T, m dnsmessage.Message) {
			require.Len(t, m.Answers, 1)
			require.Equal(t, "WWW.Allowed.Test.", m.Answers[0].Header.Name.String())
			require.Equal(t, n.Addr("www.allowed.test").As4(), m.Answers[0].Body.(*dnsmessage.AResource).A)
		}},
		{"allowed.test", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, soaOnly},
		{"nope.test", dnsmessage.TypeA, dnsmessage.RCodeNameError, soaOnly},
		{"sub.allowed.test", dnsmessage.TypeA, dnsmessage.RCodeNameError, soaOnly},
		{"example.com", dnsmessage.TypeA, dnsmessage.RCodeRefused, func(t *testing.T, m dnsmessage.Message) {
			require.Empty(t, m.Answers)
			require.False(t, m.Header.Authoritative)
		}},
		{"aGVsbG8.tunnel.denied.test", dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, func(t *testing.T, m dnsmessage.Message) {
			require.Len(t, m.Answers, 1)
			require.Equal(t, []string{"aGVsbG8"}, m.Answers[0].Body.(*dnsmessage.TXTResource).TXT)
		}},
		{"x1.x2.tunnel.denied.test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, soaOnly},
		{"tunnel.denied.test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, func(t *testing.T, m dnsmessage.Message) {
			require.Len(t, m.Answers, 1)
		}},
		{"denied.test", dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, soaOnly},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/%s/%v", network, c.name, c.qtype), func(t *testing.T) {
				m := exchange(t, n, network, c.name, c.qtype)
				require.Equal(t, c.rcode, m.Header.RCode)
				require.Len(t, m.Questions, 1)
				c.answer(t, m)
			})
		}
	}
}

func TestDNSCountsQueries(t *testing.T) {
	n := Start(t)
	require.Zero(t, n.Queries("never-asked.test"))
	before := n.Queries("counted.allowed.test")
	exchange(t, n, "udp", "counted.allowed.test", dnsmessage.TypeA)
	exchange(t, n, "tcp", "Counted.Allowed.Test", dnsmessage.TypeAAAA)
	exchange(t, n, "udp", "counted.allowed.test", dnsmessage.TypeTXT)
	require.Equal(t, before+3, n.Queries("counted.allowed.test"))
	require.Equal(t, before+3, n.Queries("COUNTED.allowed.test."))
	require.Zero(t, n.Queries("never-asked.test"))
}

func TestHTTP(t *testing.T) {
	n := Start(t)
	for _, name := range n.Names() {
		t.Run(name, func(t *testing.T) {
			resp, body := get(t, clientTo(n, n.Addr(name)), "http://"+name+"/")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "hello from "+name+"\n", body)
		})
	}
	t.Run("the answer names the address, not the Host", func(t *testing.T) {
		_, body := get(t, clientTo(n, n.Addr("denied.test")), "http://allowed.test/")
		require.Equal(t, "hello from denied.test\n", body)
	})
	t.Run("unknown path", func(t *testing.T) {
		resp, _ := get(t, clientTo(n, n.Addr("allowed.test")), "http://allowed.test/nope")
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}

func TestHTTPS(t *testing.T) {
	n := Start(t)
	for _, name := range n.Names() {
		t.Run(name, func(t *testing.T) {
			resp, body := get(t, clientTo(n, n.Addr(name)), "https://"+name+"/")
			require.Equal(t, "hello from "+name+"\n", body)
			require.Equal(t, []string{name}, resp.TLS.PeerCertificates[0].DNSNames)
		})
	}
	t.Run("spoofed SNI lands on the address's server", func(t *testing.T) {
		resp, body := get(t, clientTo(n, n.Addr("denied.test")), "https://allowed.test/")
		require.Equal(t, "hello from denied.test\n", body)
		require.Equal(t, []string{"allowed.test"}, resp.TLS.PeerCertificates[0].DNSNames)
	})
	t.Run("by address", func(t *testing.T) {
		a := n.Addr("other.test")
		_, body := get(t, clientTo(n, a), "https://"+a.String()+"/")
		require.Equal(t, "hello from other.test\n", body)
	})
	t.Run("only the test CA vouches for it", func(t *testing.T) {
		c := clientTo(n, n.Addr("allowed.test"))
		c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{}
		_, err := c.Get("https://allowed.test/")
		require.ErrorContains(t, err, "certificate signed by unknown authority")
	})
	t.Run("CAPEM holds the test CA", func(t *testing.T) {
		c := clientTo(n, n.Addr("allowed.test"))
		c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: x509PoolFromPEM(t, n.CAPEM)}
		_, body := get(t, c, "https://allowed.test/")
		require.Equal(t, "hello from allowed.test\n", body)
	})
}

func TestBytes(t *testing.T) {
	n := Start(t)
	c := clientTo(n, n.Addr("api.allowed.test"))
	for _, size := range []int64{0, 1, 1 << 20, 3<<20 + 12345} {
		for _, scheme := range []string{"http", "https"} {
			t.Run(fmt.Sprintf("%s/%d", scheme, size), func(t *testing.T) {
				resp, err := c.Get(fmt.Sprintf("%s://api.allowed.test/bytes?n=%d", scheme, size))
				require.NoError(t, err)
				defer resp.Body.Close()
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.Equal(t, size, resp.ContentLength)
				got, err := io.Copy(io.Discard, resp.Body)
				require.NoError(t, err)
				require.Equal(t, size, got)
			})
		}
	}
	for _, bad := range []string{"", "x", "-1", strconv.Itoa(4<<30 + 1)} {
		t.Run("bad n="+bad, func(t *testing.T) {
			resp, _ := get(t, c, "http://api.allowed.test/bytes?n="+bad)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		})
	}
}

func TestStream(t *testing.T) {
	n := Start(t)
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			// Line i leaves at least i intervals after the request.
			start := time.Now()
			resp, err := clientTo(n, n.Addr("other.test")).Get(scheme + "://other.test/stream")
			require.NoError(t, err)
			defer resp.Body.Close()
			lines := bufio.NewScanner(resp.Body)
			for i := range 3 {
				require.True(t, lines.Scan(), "line %d: %v", i, lines.Err())
				require.Equal(t, fmt.Sprintf("%d from other.test", i), lines.Text())
			}
			require.GreaterOrEqual(t, time.Since(start), 2*streamInterval-10*time.Millisecond)
		})
	}
}

func TestUDPEcho(t *testing.T) {
	n := Start(t)
	for _, name := range n.Names() {
		t.Run(name, func(t *testing.T) {
			c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(n.Addr(name), 7)))
			require.NoError(t, err)
			defer c.Close()
			require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
			msg := []byte("ping " + name)
			_, err = c.Write(msg)
			require.NoError(t, err)
			buf := make([]byte, 1500)
			k, err := c.Read(buf)
			require.NoError(t, err)
			require.Equal(t, msg, buf[:k])
		})
	}
}

const helperEnv = "FAKENET_TEST_HELPER"

// TestHelperProcess is the second process of TestSecondProcess: it starts
// its own fake internet, says which, and holds it until stdin closes.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("run by TestSecondProcess")
	}
	n := Start(t)
	fmt.Printf("fakenet-block %s %s %s\n", n.Prefix, n.Namespace, n.Addr("allowed.test"))
	io.Copy(io.Discard, os.Stdin)
}

func TestSecondProcess(t *testing.T) {
	n := Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", EnvRequire+"=1",
		// Under -race, a process sleeps 1 s at exit by default.
		"GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()

	var prefix, namespace, allowed string
	lines := bufio.NewScanner(stdout)
	var seen []string
	for lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 4 && f[0] == "fakenet-block" {
			prefix, namespace, allowed = f[1], f[2], f[3]
			break
		}
		seen = append(seen, lines.Text())
	}
	require.NotEmpty(t, prefix, "the helper said no block:\n%s", strings.Join(seen, "\n"))
	require.NotEqual(t, n.Prefix.String(), prefix)
	require.NotEqual(t, n.Namespace, namespace)

	// Its fake internet works next to ours, from this process.
	_, body := get(t, clientTo(n, netip.MustParseAddr(allowed)), "http://allowed.test/")
	require.Equal(t, "hello from allowed.test\n", body)

	// Prune leaves both live blocks.
	require.NoError(t, Prune())
	require.True(t, nsExists(namespace))
	require.True(t, nsExists(n.Namespace))

	// Once the helper is gone its block is stale, and Prune removes it.
	require.NoError(t, stdin.Close())
	go io.Copy(io.Discard, stdout)
	require.NoError(t, cmd.Wait())
	require.NoError(t, Prune())
	b, ok := parseBlock(namespace, nsPrefix)
	require.True(t, ok, namespace)
	requirePruned(t, b)
	_, body = get(t, clientTo(n, n.Addr("allowed.test")), "http://allowed.test/")
	require.Equal(t, "hello from allowed.test\n", body)
}

// requirePruned checks that block b's namespace and veth are gone, unless a
// live process (another test binary) has claimed the block since.
func requirePruned(t *testing.T, b block) {
	t.Helper()
	if nsExists(b.namespace()) || linkExists(b.veth()) {
		f, err := b.lock()
		require.NoError(t, err)
		if f != nil {
			f.Close()
			t.Fatalf("%s (or %s) survived Prune with its lock free", b.namespace(), b.veth())
		}
	}
}

func TestPruneRemovesStaleBlocks(t *testing.T) {
	n := Start(t)
	// Claim a free block from the top (claimers start from the bottom), make
	// it, remake it over itself as a claimer finding a dead process's
	// leftovers would, then let it go stale by releasing the lock.
	var stale block
	var lock *os.File
	for b := block(maxBlock); b > 0 && lock == nil; b-- {
		f, err := b.lock()
		require.NoError(t, err)
		stale, lock = b, f
	}
	require.NotNil(t, lock, "no free block")
	defer lock.Close()
	hosts := map[string]netip.Addr{"stale.test": stale.addr(10)}
	require.NoError(t, stale.build(hosts))
	require.NoError(t, stale.build(hosts))
	require.True(t, nsExists(stale.namespace()))
	require.True(t, linkExists(stale.veth()))

	// While locked it is live.
	require.NoError(t, Prune())
	require.True(t, nsExists(stale.namespace()))

	require.NoError(t, lock.Close())
	require.NoError(t, Prune())
	requirePruned(t, stale)
	require.True(t, nsExists(n.Namespace))
	require.True(t, linkExists(vethPrefix+strings.TrimPrefix(n.Namespace, nsPrefix)))
	_, body := get(t, clientTo(n, n.Addr("allowed.test")), "http://allowed.test/")
	require.Equal(t, "hello from allowed.test\n", body)
}

func x509PoolFromPEM(t *testing.T, pemData []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pemData))
	return pool
}

// BenchmarkDownload measures /bytes straight from the host, the ceiling for
// downloads through an enforcer.
func BenchmarkDownload(b *testing.B) {
	n := Start(b)
	const size = 256 << 20
	for _, scheme := range []string{"http", "https"} {
		b.Run(scheme, func(b *testing.B) {
			c := clientTo(n, n.Addr("allowed.test"))
			buf := make([]byte, 1<<20)
			b.SetBytes(size)
			for b.Loop() {
				resp, err := c.Get(fmt.Sprintf("%s://allowed.test/bytes?n=%d", scheme, size))
				if err != nil {
					b.Fatal(err)
				}
				// Large reads, as a download tool would do.
				got, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf)
				resp.Body.Close()
				if err != nil || got != size {
					b.Fatalf("got %d bytes of %d: %v", got, size, err)
				}
			}
		})
	}
}
