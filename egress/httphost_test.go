package egress

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHTTPHost(t *testing.T) {
	for _, tc := range []struct {
		name, req, want string
		err             error
	}{
		{"plain", "GET / HTTP/1.1\r\nHost: example.test\r\n\r\n", "example.test", nil},
		{"port and case", "POST /x?y=1 HTTP/1.1\r\nhOsT:  Example.TEST.:8080 \r\nContent-Length: 0\r\n\r\n", "example.test", nil},
		{"bare LF", "GET / HTTP/1.0\nHost: lf.test\n\n", "lf.test", nil},
		{"body follows", "PUT / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\n\r\nbody", "a.test", nil},
		{"ipv6 literal", "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", "2001:db8::1", nil},
		{"ipv4 literal", "GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n", "192.0.2.1", nil},
		{"absolute form", "GET http://abs.test:80/p HTTP/1.1\r\nHost: abs.test\r\n\r\n", "abs.test", nil},
		{"absolute form alone", "GET http://user@abs.test/ HTTP/1.1\r\n\r\n", "abs.test", nil},
		{"no host", "GET / HTTP/1.0\r\nAccept: */*\r\n\r\n", "", nil},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", "", errHostConflict},
		{"absolute form disagrees", "GET http://evil.test/ HTTP/1.1\r\nHost: good.test\r\n\r\n", "", errHostConflict},
		{"connect", "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", "", errHTTPConnect},
		{"bad host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", "", errBadHost},
		{"empty host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", "", errBadHost},
		{"bad port", "GET / HTTP/1.1\r\nHost: a.test:http\r\n\r\n", "", errBadHost},
		{"folded header", "GET / HTTP/1.1\r\nX: y\r\n Host: a.test\r\n\r\n", "", errNotHTTP},
		{"space before colon", "GET / HTTP/1.1\r\nHost : a.test\r\n\r\n", "", errNotHTTP},
		{"http2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", errNotHTTP},
		{"lower-case method", "get / HTTP/1.1\r\nHost: a.test\r\n\r\n", "", errNotHTTP},
		{"ssh", "SSH-2.0-OpenSSH_9.6\r\n", "", errNotHTTP},
		{"binary", "\x00\x00\x00\x08\x04\xd2\x16\x2f", "", errNotHTTP},
		{"long method", strings.Repeat("A", 30), "", errNotHTTP},
		{"headers not done", "GET / HTTP/1.1\r\nHost: a.test\r\n", "", errNeedMore},
		{"request line not done", "GET /index.html HT", "", errNeedMore},
		{"method only", "GET", "", errNeedMore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := httpHost([]byte(tc.req))
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestHTTPHostOfGoClient checks the parser against requests net/http
// writes.
func TestHTTPHostOfGoClient(t *testing.T) {
	for _, url := range []string{"http://go.test/", "http://Go.Test:8080/a/b?c=d", "http://[2001:db8::2]:81/"} {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		var b strings.Builder
		require.NoError(t, req.Write(&b))
		got, err := httpHost([]byte(b.String()))
		require.NoError(t, err)
		require.Equal(t, strings.ToLower(req.URL.Hostname()), got)
	}
}
