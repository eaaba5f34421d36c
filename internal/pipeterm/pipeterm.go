// Package pipeterm turns a backend's terminal stream (a function that runs
// a program on a terminal with given input and output until it ends) into
// a backend.Terminal. The k8s backend's TTY exec uses it.
package pipeterm

import (
	"context"
	"io"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Ops are what a backend does for a running terminal.
type Ops struct {
	// Resize changes the terminal's size.
	Resize func(ctx context.Context, size backend.TermSize) error
	// Kill ends the program.
	Kill func(ctx context.Context) error
}

// Run is the backend's stream: it runs the program with stdin and stdout
// until it ends or ctx is cancelled, returning its exit code.
type Run func(ctx context.Context, stdin io.Reader, stdout io.Writer) (int, error)

// Terminal is a backend.Terminal over a Run.
type Terminal struct {
	id     string
	ops    Ops
	in     *io.PipeWriter
	out    *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	code   int
	err    error
	exited bool
	closed bool
}

// Start runs run in the background. Closing the terminal cancels run's
// context and kills the program (these terminals end with their client).
func Start(id string, run Run, ops Ops) *Terminal {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t := &Terminal{id: id, ops: ops, in: inW, out: outR, cancel: cancel, done: make(chan struct{})}
	go func() {
		code, err := run(ctx, inR, outW)
		t.mu.Lock()
		t.code, t.err, t.exited = code, err, err == nil
		t.mu.Unlock()
		// Input ends cleanly for a stream still copying it (a closed
		// reader would make its copy fail loudly).
		inW.Close()
		outW.Close()
		close(t.done)
	}()
	return t
}

func (t *Terminal) ID() string { return t.id }

// Read returns the program's output, then io.EOF once it ended (or the
// stream's error).
func (t *Terminal) Read(p []byte) (int, error) {
	n, err := t.out.Read(p)
	if err == io.EOF {
		<-t.done
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.err != nil && !t.closed {
			return n, t.err
		}
	}
	return n, err
}

func (t *Terminal) Write(p []byte) (int, error) { return t.in.Write(p) }

func (t *Terminal) Resize(ctx context.Context, size backend.TermSize) error {
	return t.ops.Resize(ctx, size)
}

func (t *Terminal) ExitCode() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.code, t.exited
}

func (t *Terminal) Kill(ctx context.Context) error { return t.ops.Kill(ctx) }

// Close ends the stream and kills what is left of the program.
func (t *Terminal) Close() error {
	t.mu.Lock()
	already, exited := t.closed, t.exited
	t.closed = true
	t.mu.Unlock()
	if already {
		return nil
	}
	if !exited {
		t.ops.Kill(context.Background())
	}
	t.cancel()
	t.in.Close()
	t.out.Close()
	return nil
}

// SizeQueue hands sizes to a stream that asks for them one at a time
// (client-go's TerminalSizeQueue): the latest size wins.
type SizeQueue struct {
	ch   chan backend.TermSize
	done <-chan struct{}
}

// NewSizeQueue returns a queue whose Next ends (nil) once done is closed.
func NewSizeQueue(first backend.TermSize, done <-chan struct{}) *SizeQueue {
	q := &SizeQueue{ch: make(chan backend.TermSize, 1), done: done}
	if first.Rows > 0 && first.Cols > 0 {
		q.ch <- first
	}
	return q
}

// Push queues size, replacing one not taken yet.
func (q *SizeQueue) Push(size backend.TermSize) {
	for {
		select {
		case q.ch <- size:
			return
		default:
		}
		select {
		case <-q.ch:
		default:
		}
	}
}

// Next waits for the next size; false once the queue is done.
func (q *SizeQueue) Next() (backend.TermSize, bool) {
	select {
	case s := <-q.ch:
		return s, true
	case <-q.done:
		return backend.TermSize{}, false
	}
}
