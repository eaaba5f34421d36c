// Package stdinpipe feeds a command's stdin from a reader through a pipe of
// its own. Given a reader that is not a file, os/exec copies it itself and
// Wait waits for that copy, so a command that exits without reading its
// stdin would hang until the caller closed the reader.
package stdinpipe

import (
	"io"
	"os"
	"os/exec"

	"github.com/sandboxkit/sandboxkit/internal/childpipe"
)

// Pipe is a command's stdin fed from a reader. A nil *Pipe (no stdin, or a
// file given to the command as it is) does nothing.
type Pipe struct {
	src    io.Reader
	pr, pw *os.File
}

// Set connects src to cmd's stdin: /dev/null when src is nil, a file as it
// is, any other reader through a Pipe, which it returns. Call Started once
// cmd started (or failed to), and Close when it has exited.
func Set(cmd *exec.Cmd, src io.Reader) (*Pipe, error) {
	if src == nil {
		// os/exec would open /dev/null for this command, and close it.
		if null, err := childpipe.DevNull(); err == nil {
			cmd.Stdin = null
		}
		return nil, nil
	}
	if f, ok := src.(*os.File); ok {
		cmd.Stdin = f
		return nil, nil
	}
	pw, pr, err := childpipe.ForInput()
	if err != nil {
		return nil, err
	}
	cmd.Stdin = pr
	return &Pipe{src: src, pr: pr, pw: pw}, nil
}

// Started closes this process's copy of the command's end and, when the
// command started (startErr == nil), copies the reader into the pipe until
// it ends; else it closes the pipe.
func (p *Pipe) Started(startErr error) {
	if p == nil {
		return
	}
	p.pr.Close()
	if startErr != nil {
		p.pw.Close()
		return
	}
	go func() {
		io.Copy(p.pw, p.src)
		p.pw.Close()
	}()
}

// Close closes the pipe, which ends the copy of a command that exited
// without reading all of its stdin.
func (p *Pipe) Close() {
	if p != nil {
		p.pw.Close()
	}
}
