package termbuf

// Terminal output is text interleaved with control: escape sequences that
// colour it, move the cursor, set the window title or ask the terminal
// questions, and control characters (carriage returns, backspaces, bells).
// Strip and Stripper keep the text for readers that are not terminals (an
// agent reading a REPL's answer).

// Bytes Strip treats specially.
const (
	esc = 0x1b
	bel = 0x07
	can = 0x18 // cancels a sequence in progress
	sub = 0x1a // cancels a sequence in progress
	del = 0x7f
)

// States of a Stripper between bytes.
const (
	ground   uint8 = iota // text
	escape                // after ESC
	escInter              // ESC and intermediate bytes (ESC ( B): until a final byte
	csi                   // ESC [: parameters and intermediates until a final byte
	str                   // OSC, DCS, SOS, PM, APC: until BEL or ESC \
	strEsc                // ESC inside a string: \ ends it, anything else starts a new sequence
)

// Stripper removes escape sequences and control characters from a stream
// that comes in pieces: a sequence split between two pieces is still
// removed whole. The zero value is ready at the start of a stream.
//
// What is removed: CSI sequences (ESC [ parameters final), OSC, DCS, SOS,
// PM and APC strings (ESC ] ... ended by BEL or ESC \), other escape
// sequences (ESC, intermediates 0x20-0x2f, a final byte), and every C0
// control character and DEL but newline and tab. So carriage returns go:
// "\r\n" becomes "\n" and a lone "\r" is dropped. A newline inside a
// sequence ends the sequence (and is kept), so a stray ESC cannot swallow
// more than the rest of its line; CAN and SUB cancel a sequence as on a
// terminal. Bytes 0x80 and up are text (UTF-8), never 8-bit controls.
type Stripper struct {
	state uint8
}

// Append appends p, stripped, to dst and returns the result. It never
// produces more bytes than p holds, so dst may be p[:0] to strip p in
// place.
func (s *Stripper) Append(dst, p []byte) []byte {
	st := s.state
	for i := 0; i < len(p); {
		c := p[i]
		switch st {
		case ground:
			switch {
			case c == esc:
				st = escape
			case c == '\n' || c == '\t':
				dst = append(dst, c)
			case c < 0x20 || c == del:
				// control characters, \r included: dropped
			default:
				dst = append(dst, c)
			}
		case escape, escInter:
			switch {
			case c == '[' && st == escape:
				st = csi
			case (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') && st == escape:
				st = str
			case c >= 0x20 && c <= 0x2f:
				st = escInter
			case c >= 0x30 && c <= 0x7e:
				st = ground // the final byte
			case c >= 0x80:
				st = ground // not a sequence after all: c is text
				continue
			default:
				st = control(st, c, &dst)
			}
		case csi:
			switch {
			case c >= 0x20 && c <= 0x3f:
				// parameters and intermediates
			case c >= 0x40 && c <= 0x7e:
				st = ground // the final byte
			case c >= 0x80:
				st = ground
				continue
			default:
				st = control(st, c, &dst)
			}
		case str:
			switch c {
			case bel, can, sub:
				st = ground
			case esc:
				st = strEsc
			case '\n':
				dst = append(dst, c)
				st = ground
			}
		case strEsc:
			if c == '\\' {
				st = ground
				break
			}
			st = escape // a new sequence begins: c is its first byte
			continue
		}
		i++
	}
	s.state = st
	return dst
}

// control handles control character c inside a sequence in state st and
// returns the next state: ESC starts a new sequence, CAN and SUB cancel
// it, a newline ends it (and is kept), others are ignored (DEL too).
func control(st, c uint8, dst *[]byte) uint8 {
	switch c {
	case esc:
		return escape
	case can, sub:
		return ground
	case '\n':
		*dst = append(*dst, c)
		return ground
	}
	return st
}

// Strip returns b as plain text: without escape sequences and control
// characters but newline and tab, as Stripper removes them.
func Strip(b []byte) string {
	var s Stripper
	return string(s.Append(make([]byte, 0, len(b)), b))
}
