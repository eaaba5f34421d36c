package egress

import (
	"errors"
)

// errNeedMore: what was read so far is a valid beginning; read more.
var errNeedMore = errors.New("need more bytes")

// Errors of clientHelloSNI.
var (
	errNotHello = errors.New("not a TLS ClientHello")
	errBadSNI   = errors.New("TLS SNI is not a host name")
)

const (
	tlsRecordHandshake = 0x16
	tlsClientHello     = 1
	tlsExtServerName   = 0
	tlsSNIHostName     = 0
	tlsMaxRecord       = 1 << 14 // RFC 8446 5.1: plaintext fragments are at most 2^14 bytes
)

// clientHelloSNI returns the server name of the TLS ClientHello that data
// begins with, "" if it has none. The hello may come in several handshake
// records; data may end anywhere, and errNeedMore says that it is a valid
// beginning without the server name yet. The name is returned as soon as
// its extension is whole, so a large hello need not fit the peek buffer.
func clientHelloSNI(data []byte) (string, error) {
	hs, final, err := handshakeBytes(data)
	if err != nil {
		return "", err
	}
	name, err := helloSNI(hs)
	if err == errNeedMore && final {
		err = errNotHello
	}
	return name, err
}

// handshakeBytes joins the handshake records data begins with (the last
// may be cut short) into the handshake stream they carry. final: a record
// of another type follows (early data, change_cipher_spec), so no more
// handshake bytes will come.
func handshakeBytes(data []byte) (hs []byte, final bool, err error) {
	if len(data) > 5 && len(data) <= 5+tlsMaxRecord && data[0] == tlsRecordHandshake && data[1] == 3 &&
		int(data[3])<<8|int(data[4]) == len(data)-5 {
		return data[5:], false, nil // one whole record, the usual case: no copy
	}
	for len(data) > 0 {
		if data[0] != tlsRecordHandshake {
			if len(hs) == 0 {
				return nil, false, errNotHello
			}
			return hs, true, nil
		}
		if len(data) < 5 {
			break
		}
		n := int(data[3])<<8 | int(data[4])
		if data[1] != 3 || n == 0 || n > tlsMaxRecord {
			return nil, false, errNotHello
		}
		data = data[5:]
		if n > len(data) {
			n = len(data)
		}
		hs = append(hs, data[:n]...)
		data = data[n:]
	}
	return hs, false, nil
}

// helloReader reads the fields of a handshake message that may be cut
// short. Lengths are checked against the message's declared bounds, so a
// field that could never fit is errNotHello, and one that could but was
// not read yet is errNeedMore.
type helloReader struct {
	b   []byte // what was read of the message
	pos int
}

// take returns the n bytes at the reader's position, which must end by
// end (an offset in the message).
func (r *helloReader) take(n, end int) ([]byte, error) {
	switch {
	case r.pos+n > end:
		return nil, errNotHello
	case r.pos+n > len(r.b):
		return nil, errNeedMore
	}
	v := r.b[r.pos : r.pos+n]
	r.pos += n
	return v, nil
}

// vector reads a length of size bytes and returns the offset where the
// vector it prefixes ends.
func (r *helloReader) vector(size, end int) (int, error) {
	l, err := r.take(size, end)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range l {
		n = n<<8 | int(c)
	}
	if r.pos+n > end {
		return 0, errNotHello
	}
	return r.pos + n, nil
}

// helloSNI parses the ClientHello (RFC 8446 4.1.2) at the start of the
// handshake stream hs up to its server_name extension (RFC 6066 3).
func helloSNI(hs []byte) (string, error) {
	if len(hs) < 4 {
		return "", errNeedMore
	}
	if hs[0] != tlsClientHello {
		return "", errNotHello
	}
	end := 4 + (int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3]))
	r := &helloReader{b: hs, pos: 4}
	if _, err := r.take(2+32, end); err != nil { // legacy_version, random
		return "", err
	}
	for i, size := range []int{1, 2, 1} { // session id, cipher suites, compression methods
		e, err := r.vector(size, end)
		if err != nil {
			return "", err
		}
		if i == 0 && e-r.pos > 32 {
			return "", errNotHello
		}
		if e > len(hs) {
			return "", errNeedMore
		}
		r.pos = e
	}
	if r.pos == end {
		return "", nil // no extensions
	}
	extEnd, err := r.vector(2, end)
	if err != nil {
		return "", err
	}
	for r.pos < extEnd {
		typ, err := r.take(2, extEnd)
		if err != nil {
			return "", err
		}
		dataEnd, err := r.vector(2, extEnd)
		if err != nil {
			return "", err
		}
		if typ[0] == 0 && typ[1] == tlsExtServerName {
			return r.serverName(dataEnd)
		}
		if dataEnd > len(hs) {
			return "", errNeedMore
		}
		r.pos = dataEnd
	}
	return "", nil
}

// serverName reads the server_name extension's data, which ends at end,
// and returns its first host_name.
func (r *helloReader) serverName(end int) (string, error) {
	listEnd, err := r.vector(2, end)
	if err != nil {
		return "", err
	}
	for r.pos < listEnd {
		typ, err := r.take(1, listEnd)
		if err != nil {
			return "", err
		}
		nameEnd, err := r.vector(2, listEnd)
		if err != nil {
			return "", err
		}
		name, err := r.take(nameEnd-r.pos, nameEnd)
		if err != nil {
			return "", err
		}
		if typ[0] == tlsSNIHostName {
			n := normalizeName(string(name))
			if checkName(n) != "" {
				return "", errBadSNI
			}
			return n, nil
		}
	}
	return "", nil
}
