package egress

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// captureHello returns the records of the ClientHello crypto/tls sends
// with cfg, read from the other end of a net.Pipe.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(client, cfg).Handshake() // fails once server is closed
	}()
	defer func() {
		server.Close()
		client.Close()
		<-done
	}()
	server.SetDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	_, err := io.ReadFull(server, hdr)
	require.NoError(t, err)
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	_, err = io.ReadFull(server, body)
	require.NoError(t, err)
	require.Equal(t, byte(tlsRecordHandshake), hdr[0])
	require.Equal(t, byte(tlsClientHello), body[0])
	return append(hdr, body...)
}

// reRecord splits the handshake bytes of the records in hello into
// records of at most size bytes each, as a TLS stack may.
func reRecord(t testing.TB, hello []byte, size int) []byte {
	t.Helper()
	hs, final, err := handshakeBytes(hello)
	require.NoError(t, err)
	require.False(t, final)
	var out []byte
	for len(hs) > 0 {
		n := min(size, len(hs))
		out = append(out, tlsRecordHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, hs[:n]...)
		hs = hs[n:]
	}
	return out
}

var helloConfigs = []struct {
	name string
	cfg  *tls.Config
	want string
}{
	{"tls13", &tls.Config{ServerName: "www.example.test"}, "www.example.test"},
	{"upper case", &tls.Config{ServerName: "WWW.Example.TEST"}, "www.example.test"},
	{"tls12 only", &tls.Config{ServerName: "a.test", MaxVersion: tls.VersionTLS12}, "a.test"},
	{"alpn", &tls.Config{ServerName: "alpn.test", NextProtos: []string{"h2", "http/1.1"}}, "alpn.test"},
	{"long name", &tls.Config{ServerName: "a123456789012345678901234567890123456789012345678901234567890.b.c.test"}, "a123456789012345678901234567890123456789012345678901234567890.b.c.test"},
	{"no sni", &tls.Config{InsecureSkipVerify: true}, ""},
	{"ip: no sni", &tls.Config{ServerName: "127.0.0.1"}, ""},
}

func TestClientHelloSNI(t *testing.T) {
	for _, tc := range helloConfigs {
		t.Run(tc.name, func(t *testing.T) {
			hello := captureHello(t, tc.cfg)
			for _, data := range [][]byte{hello, reRecord(t, hello, 1), reRecord(t, hello, 7), reRecord(t, hello, 100)} {
				name, err := clientHelloSNI(data)
				require.NoError(t, err)
				require.Equal(t, tc.want, name)
				// Every beginning is a valid one: more is needed or the
				// name is already there. (Cut to spare -race the square.)
				for i := range min(len(data), 3000) {
					name, err := clientHelloSNI(data[:i])
					if err != errNeedMore {
						require.NoError(t, err, "prefix of %d bytes", i)
						require.Equal(t, tc.want, name, "prefix of %d bytes", i)
						require.NotEmpty(t, name, "a hello without SNI is known to be one only when whole")
					}
				}
			}
			// A record of another type after the hello (early data) ends it.
			name, err := clientHelloSNI(append(hello, 0x17, 3, 3, 0, 1, 0))
			require.NoError(t, err)
			require.Equal(t, tc.want, name)
		})
	}
}

// trickle writes data to w a byte per Write, so that each Read on the
// other end of a net.Pipe returns one byte.
func trickle(w net.Conn, data []byte) {
	for i := range data {
		if _, err := w.Write(data[i : i+1]); err != nil {
			return
		}
	}
}

func TestPeekNameOneByteReads(t *testing.T) {
	for _, tc := range helloConfigs {
		t.Run(tc.name, func(t *testing.T) {
			hello := reRecord(t, captureHello(t, tc.cfg), 50)
			a, b := net.Pipe()
			defer a.Close()
			go trickle(a, hello)
			p := peekName(b, 5*time.Second)
			b.Close()
			require.Equal(t, tc.want, p.name, p.why)
			require.True(t, p.web)
			require.Equal(t, hello[:len(p.head)], p.head, "what was read is kept to be sent on")
			if tc.want == "" {
				require.Equal(t, hello, p.head)
				require.Equal(t, "TLS ClientHello without SNI", p.why)
			}
		})
	}
	t.Run("http", func(t *testing.T) {
		req := []byte("GET /x HTTP/1.1\r\nUser-Agent: t\r\nHost: Web.Test:8080\r\n\r\n")
		a, b := net.Pipe()
		defer a.Close()
		go trickle(a, req)
		p := peekName(b, 5*time.Second)
		b.Close()
		require.Equal(t, "web.test", p.name, p.why)
		require.Equal(t, req, p.head)
	})
	t.Run("other protocol", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		go trickle(a, []byte("SSH-2.0-OpenSSH_9.6\r\n"))
		p := peekName(b, 5*time.Second)
		b.Close()
		require.Empty(t, p.name)
		require.False(t, p.web)
		require.Equal(t, "SSH-", string(p.head), "known not to be TLS or HTTP at the first byte that is neither")
	})
	t.Run("other protocol in one read", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		go a.Write([]byte("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"))
		p := peekName(b, 5*time.Second)
		b.Close()
		require.False(t, p.web)
		require.Equal(t, "no TLS SNI or HTTP Host in the first bytes", p.why, "known at once, not at the timeout")
	})
	t.Run("nothing comes", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		p := peekName(b, 50*time.Millisecond)
		b.Close()
		require.Empty(t, p.name)
		require.Contains(t, p.why, "no TLS SNI or HTTP Host")
	})
}

func TestClientHelloSNIMalformed(t *testing.T) {
	hello := captureHello(t, &tls.Config{ServerName: "x.test"})
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), hello...)) }
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"not handshake", []byte{0x17, 3, 3, 0, 5, 1, 2, 3, 4, 5}},
		{"record version", mutate(func(b []byte) []byte { b[1] = 2; return b })},
		{"empty record", []byte{0x16, 3, 1, 0, 0}},
		{"oversized record", []byte{0x16, 3, 1, 0x40, 0x01}},
		{"server hello", mutate(func(b []byte) []byte { b[5] = 2; return b })},
		{"message shorter than its fields", mutate(func(b []byte) []byte { b[6], b[7], b[8] = 0, 0, 10; return b })},
		{"session id past the end", mutate(func(b []byte) []byte { b[5+4+34] = 0xff; return b })},
		{"alert after a partial hello", append(append([]byte(nil), reRecord(t, hello, 20)[:25]...), 0x15, 3, 3, 0, 2, 2, 40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := clientHelloSNI(tc.data)
			require.ErrorIs(t, err, errNotHello)
		})
	}
	t.Run("bad host name", func(t *testing.T) {
		bad := captureHello(t, &tls.Config{ServerName: "x_y.test"})
		i := bytes.Index(bad, []byte("x_y.test"))
		require.Positive(t, i)
		bad[i+1] = '/' // "x/y.test"
		_, err := clientHelloSNI(bad)
		require.ErrorIs(t, err, errBadSNI)
	})
}
