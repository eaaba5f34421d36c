package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// How much of a connection's first bytes are read, and for how long,
// looking for its name.
const (
	peekMax     = 16 << 10
	peekTimeout = 10 * time.Second
	// recordPeekTimeout is how long a connection that will be refused
	// whatever its name is read, so that its record says what name it
	// was for: a client that waits for the server to speak first is
	// refused after this, not after peekTimeout.
	recordPeekTimeout = 250 * time.Millisecond
)

// peeked is what the first bytes of a connection told.
type peeked struct {
	head []byte // the bytes read, sent on to the destination
	name string // TLS SNI or HTTP Host, normalized; "" if none
	// web: the bytes were TLS or HTTP. A default allow policy lets other
	// protocols through without a name, but not TLS without SNI or HTTP
	// without a usable Host, which would be a way around its deny rules.
	web bool
	why string // why there is no name
}

// peekName reads the first bytes of c until they give a TLS SNI or an
// HTTP Host, show that they will not, fill peekMax, or timeout passes.
func peekName(c net.Conn, timeout time.Duration) peeked {
	buf := make([]byte, 0, peekMax)
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	for len(buf) < cap(buf) {
		prev := len(buf)
		n, rerr := c.Read(buf[prev:cap(buf)])
		buf = buf[:prev+n]
		// Once the method was checked, HTTP's answer can only change when
		// a line ends; skipping the other reads keeps a trickled request
		// from costing quadratic time.
		if prev > maxMethod && buf[0] != tlsRecordHandshake && bytes.IndexByte(buf[prev:], '\n') < 0 && rerr == nil {
			continue
		}
		p, more := sniff(buf)
		if !more {
			return p
		}
		if rerr != nil {
			p.why = readFailure(rerr, timeout)
			return p
		}
	}
	return peeked{head: buf, web: true, why: fmt.Sprintf("no TLS SNI or HTTP Host in the first %d bytes", peekMax)}
}

func readFailure(err error, timeout time.Duration) string {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("no TLS SNI or HTTP Host in the first bytes (none came for %s)", timeout)
	case errors.Is(err, io.EOF):
		return "closed before a TLS SNI or HTTP Host was seen"
	default:
		return "reading the first bytes: " + err.Error()
	}
}

// sniff looks for a name in the first bytes buf of a connection; more:
// they are a valid beginning, read on.
func sniff(buf []byte) (p peeked, more bool) {
	p = peeked{head: buf, web: true}
	if len(buf) == 0 {
		return p, true
	}
	var err error
	if buf[0] == tlsRecordHandshake {
		p.name, err = clientHelloSNI(buf)
		if err == nil && p.name == "" {
			p.why = "TLS ClientHello without SNI"
		}
	} else {
		p.name, err = httpHost(buf)
		if err == nil && p.name == "" {
			p.why = "HTTP request without Host"
		}
	}
	switch {
	case err == errNeedMore:
		return p, true
	case err == errNotHello || err == errNotHTTP:
		p.why = "no TLS SNI or HTTP Host in the first bytes"
		// Only bytes that are clearly neither count as another protocol:
		// what a server might still take for TLS or HTTP must not pass
		// for lack of a name a stricter parser did not find.
		p.web = buf[0] == tlsRecordHandshake || plausibleMethod(buf)
	case err != nil:
		p.why = err.Error()
	}
	return p, false
}
