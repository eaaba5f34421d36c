package egress

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const benchRequest = "GET /big HTTP/1.1\r\nHost: web.test\r\n\r\n"

// startSource serves on 127.0.0.1 a download of size bytes to each
// connection once it has sent its request's header.
func startSource(tb testing.TB, size int64) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	tb.Cleanup(func() { l.Close() })
	chunk := make([]byte, 1<<20)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.TrimSpace(line) == "" {
						break
					}
				}
				for left := size; left > 0; {
					n, err := c.Write(chunk[:min(left, int64(len(chunk)))])
					if err != nil {
						return
					}
					left -= int64(n)
				}
			}()
		}
	}()
	return l.Addr().String()
}

// download fetches the source's bytes through addr, b.N times.
func download(b *testing.B, addr string, size int64) {
	buf := make([]byte, 1<<20)
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		require.NoError(b, err)
		_, err = io.WriteString(c, benchRequest)
		require.NoError(b, err)
		var got int64
		for {
			n, err := c.Read(buf)
			got += int64(n)
			if err == io.EOF {
				break
			}
			require.NoError(b, err)
		}
		c.Close()
		require.Equal(b, size, got)
	}
}

// BenchmarkProxyThroughput downloads 256 MiB over loopback: straight from
// the server (the baseline), through the proxy allowed by an address rule,
// and through the proxy allowed by the request's Host after a resolution
// through the enforcer's DNS.
func BenchmarkProxyThroughput(b *testing.B) {
	const size = 256 << 20
	src := startSource(b, size)
	b.Run("direct", func(b *testing.B) {
		download(b, src, size)
	})
	b.Run("proxy-address-rule", func(b *testing.B) {
		te := startEnforcer(b, mustPolicy(b, Deny, []string{"127.0.0.1"}, nil), "127.0.0.1:53")
		download(b, te.startProxy(b, src), size)
	})
	b.Run("proxy-http-host", func(b *testing.B) {
		up := startUpstream(b, zoneRecords(b, "web.test A 127.0.0.1"))
		te := startEnforcer(b, mustPolicy(b, Deny, []string{"web.test"}, nil), up.addr)
		te.resolve(b, "web.test")
		download(b, te.startProxy(b, src), size)
	})
}
