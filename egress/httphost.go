package egress

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
)

// Errors of httpHost.
var (
	errNotHTTP      = errors.New("not an HTTP/1.x request")
	errHTTPConnect  = errors.New("HTTP CONNECT is not followed")
	errHostConflict = errors.New("HTTP request names two hosts")
	errBadHost      = errors.New("HTTP Host is not a host name")
)

// maxMethod bounds a request method, so that other protocols are told
// apart from HTTP after a few bytes.
const maxMethod = 20

// httpHost returns the host (lower case, without port) of the HTTP/1.x
// request data begins with, "" if it names none. It needs the whole
// header block (errNeedMore until then): a second Host header would make
// the first one a lie.
func httpHost(data []byte) (string, error) {
	line, rest, ok := cutLine(data)
	if !ok {
		if !plausibleMethod(data) {
			return "", errNotHTTP
		}
		return "", errNeedMore
	}
	target, err := requestTarget(line)
	if err != nil {
		return "", err
	}
	var host string
	hosts := 0
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return "", errNeedMore
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "", errNotHTTP // obsolete line folding (RFC 9112 5.2)
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || bytes.ContainsAny(name, " \t") {
			return "", errNotHTTP
		}
		if strings.EqualFold(string(name), "host") {
			host, hosts = string(bytes.Trim(value, " \t")), hosts+1
		}
	}
	if hosts > 1 {
		return "", errHostConflict
	}
	return chooseHost(target, host, hosts == 1)
}

// chooseHost returns the request's host: the absolute target's, which
// RFC 9112 3.2.2 says wins, as long as a Host header does not disagree.
func chooseHost(targetHost, header string, hasHeader bool) (string, error) {
	var h string
	var err error
	if hasHeader {
		if h, err = hostOnly(header); err != nil {
			return "", err
		}
	}
	if targetHost == "" {
		return h, nil
	}
	t, err := hostOnly(targetHost)
	if err != nil {
		return "", err
	}
	if hasHeader && t != h {
		return "", errHostConflict
	}
	return t, nil
}

// cutLine cuts data at its first line end (LF, with or without CR).
func cutLine(data []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return nil, data, false
	}
	return bytes.TrimSuffix(data[:i], []byte("\r")), data[i+1:], true
}

// plausibleMethod reports whether data may begin an HTTP request line.
func plausibleMethod(data []byte) bool {
	for i, c := range data {
		switch {
		case c == ' ' && i > 0:
			return true
		case c < 'A' || c > 'Z' || i >= maxMethod:
			return false
		}
	}
	return true
}

// requestTarget checks the request line and returns the host of an
// absolute-form target ("GET http://host/ HTTP/1.1"), "" for other forms.
func requestTarget(line []byte) (string, error) {
	parts := strings.Split(string(line), " ")
	if len(parts) != 3 || !plausibleMethod([]byte(parts[0]+" ")) || !isHTTP1(parts[2]) {
		return "", errNotHTTP
	}
	method, target := parts[0], parts[1]
	switch {
	case method == "CONNECT":
		return "", errHTTPConnect
	case target == "" || strings.ContainsFunc(target, func(r rune) bool { return r < '!' || r > '~' }):
		return "", errNotHTTP
	case target[0] == '/' || target == "*":
		return "", nil
	}
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok || !(strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")) {
		return "", errNotHTTP
	}
	authority, _, _ := strings.Cut(rest, "/")
	authority, _, _ = strings.Cut(authority, "?")
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	if authority == "" {
		return "", errBadHost
	}
	return authority, nil
}

func isHTTP1(version string) bool {
	v, ok := strings.CutPrefix(version, "HTTP/1.")
	return ok && len(v) == 1 && v[0] >= '0' && v[0] <= '9'
}

// hostOnly returns the host of a Host value, normalized and without port.
// An IP literal is returned as such (no name rule matches it).
func hostOnly(v string) (string, error) {
	if rest, ok := strings.CutPrefix(v, "["); ok {
		a, after, ok := strings.Cut(rest, "]")
		ip, err := netip.ParseAddr(a)
		if !ok || err != nil || (after != "" && !isPort(strings.TrimPrefix(after, ":"))) || (after != "" && after[0] != ':') {
			return "", errBadHost
		}
		return ip.String(), nil
	}
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		if !isPort(v[i+1:]) {
			return "", errBadHost
		}
		v = v[:i]
	}
	name := normalizeName(v)
	if checkName(name) != "" {
		return "", errBadHost
	}
	return name, nil
}

// isPort: digits only, possibly none ("host:" is allowed by RFC 3986).
func isPort(s string) bool {
	return len(s) <= 5 && strings.Trim(s, "0123456789") == ""
}
