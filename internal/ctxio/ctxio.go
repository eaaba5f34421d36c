// Package ctxio stops a copy when its context ends.
package ctxio

import (
	"context"
	"io"
)

// Reader returns r read only while ctx lasts: once ctx ends, Read returns
// its error, so an io.Copy from it stops at the next chunk.
func Reader(ctx context.Context, r io.Reader) io.Reader { return reader{ctx, r} }

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (c reader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
