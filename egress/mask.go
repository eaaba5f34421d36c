package egress

import (
	"bytes"
	"encoding/base64"
	"io"
)

// maskPair is a secret and what stands for it in what the sandbox gets.
type maskPair struct{ secret, mask []byte }

// maskWriter writes to w what is written to it with every secret replaced
// by its mask, also where a secret is split between writes: it holds back
// only the end of what it was given that could start a secret (so a
// streamed answer's events pass at once unless they end in what might be
// one), and Close writes what it held.
type maskWriter struct {
	w     io.Writer
	pairs []maskPair
	held  []byte
}

// newMaskWriter returns a maskWriter of pairs whose secrets are not empty.
func newMaskWriter(w io.Writer, pairs []maskPair) *maskWriter {
	m := &maskWriter{w: w}
	for _, p := range pairs {
		if len(p.secret) > 0 {
			m.pairs = append(m.pairs, p)
		}
	}
	return m
}

// Write takes all of p (n == len(p) unless w fails).
func (m *maskWriter) Write(p []byte) (int, error) {
	buf := p
	if len(m.held) > 0 {
		buf = append(m.held, p...)
		m.held = nil
	}
	if err := m.process(buf, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what was held back, masked (the answer ended: what may
// have started a secret did not).
func (m *maskWriter) Close() error {
	held := m.held
	m.held = nil
	return m.process(held, true)
}

// process writes buf masked, holding back (unless final) its end that may
// start a secret.
func (m *maskWriter) process(buf []byte, final bool) error {
	partial := func(b []byte) int {
		if final {
			return 0
		}
		return m.partial(b)
	}
	var out []byte // nil while nothing is replaced: buf goes out as is
	rest := buf
	for {
		i, pair := m.first(rest)
		if i < 0 || len(rest)-partial(rest) <= i {
			// None, or not decided yet: a secret that starts at or
			// before it may complete with what comes next (and the
			// leftmost, longest wins).
			break
		}
		out = append(out, rest[:i]...)
		out = append(out, pair.mask...)
		rest = rest[i+len(pair.secret):]
	}
	keep := partial(rest)
	if out == nil {
		out = rest[:len(rest)-keep]
	} else {
		out = append(out, rest[:len(rest)-keep]...)
	}
	if keep > 0 {
		m.held = append([]byte(nil), rest[len(rest)-keep:]...)
	}
	if len(out) > 0 {
		if _, err := m.w.Write(out); err != nil {
			return err
		}
	}
	return nil
}

// first returns where the first secret in b starts, and which; -1 if none.
func (m *maskWriter) first(b []byte) (int, maskPair) {
	at, which := -1, maskPair{}
	for _, p := range m.pairs {
		if i := bytes.Index(b, p.secret); i >= 0 && (at < 0 || i < at || (i == at && len(p.secret) > len(which.secret))) {
			at, which = i, p
		}
	}
	return at, which
}

// partial returns the length of the longest end of b that is the start of
// a secret (not all of it: whole secrets were replaced).
func (m *maskWriter) partial(b []byte) int {
	keep := 0
	for _, p := range m.pairs {
		for k := min(len(p.secret)-1, len(b)); k > keep; k-- {
			if bytes.HasSuffix(b, p.secret[:k]) {
				keep = k
				break
			}
		}
	}
	return keep
}

// masks returns what to hide of c's value v in answers, and with what:
// the value itself and, for basic auth, its encoded form, each by the
// placeholder (or a mark when the sandbox was given none).
func (c *Credential) masks(v string) []maskPair {
	if v == "" {
		return nil
	}
	mask := c.Placeholder
	if mask == "" {
		mask = "[credential]"
	}
	pairs := []maskPair{{secret: []byte(v), mask: []byte(mask)}}
	if c.BasicUser != "" {
		enc := base64.StdEncoding.EncodeToString([]byte(c.BasicUser + ":" + v))
		pairs = append(pairs, maskPair{secret: []byte(enc), mask: []byte(base64.StdEncoding.EncodeToString([]byte(c.BasicUser + ":" + mask)))})
	}
	return pairs
}
