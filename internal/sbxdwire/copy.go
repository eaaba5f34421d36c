package sbxdwire

import (
	"bufio"
	"io"
	"sync"
)

// copyBufSize is the buffer of file transfers: large writes become few,
// large stream frames.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// CopyBuffered copies with a pooled buffer; it hides ReaderFrom/WriterTo so
// the buffer size is what decides the frame size.
func CopyBuffered(dst io.Writer, src io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}

// CopyLines copies lines first..first+n-1 (1-based; n 0: to the end) of r,
// with their line endings: the file route's line range, which the client
// applies the same way when it reads without an agent.
func CopyLines(w io.Writer, r io.Reader, first, n int) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for i := 1; i < first; i++ {
		if _, err := br.ReadSlice('\n'); err != nil {
			if err == bufio.ErrBufferFull {
				i-- // the same line goes on
				continue
			}
			return nil
		}
	}
	if n <= 0 {
		_, err := CopyBuffered(w, br)
		return err
	}
	for i := 0; i < n; {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if _, werr := w.Write(chunk); werr != nil {
				return werr
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
		case err != nil:
			return nil
		default:
			i++
		}
	}
	return nil
}
