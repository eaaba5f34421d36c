// Package pipeterm turns a backend's terminal stream (a function that runs
// a program on a terminal with given input and output until it ends) into
// a backend.Terminal: the k8s backend's TTY exec, and (StartPTY) the local
// and lite backends' pseudo-terminals.
package pipeterm

import (
	"context"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/pty"
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

// PTYProgram is a program this process started on a pseudo-terminal whose
// master it holds (the local and lite backends' own terminals).
type PTYProgram struct {
	ID     string
	Master *os.File
	// Wait waits for the program's end; it is called once.
	Wait func() error
	// Kill ends the program's tree; it is called again every 50 ms until
	// Wait returns, for processes still being started at the first call.
	Kill func(ctx context.Context) error
	// End returns the exit code once the program ended and its output was
	// copied, writing any last word (why it did not start) to out.
	End func(out io.Writer) int
}

// StartPTY runs the copies between a Terminal and p's master: input to
// the program, its output back until the terminal hangs up (EIO once
// nothing holds it; children still holding it get a second after the
// program ended). Resize sizes the master.
func StartPTY(p PTYProgram) *Terminal {
	waited := make(chan struct{}) // closed when Wait returned
	// killUntilEnded kills the program's tree every 50 ms until it ended
	// (a process between fork and exec, or in the middle of an exec, can
	// slip past one look for it), for at most bound.
	killUntilEnded := func(ctx context.Context, bound time.Duration) {
		deadline := time.After(bound)
		for {
			p.Kill(ctx)
			select {
			case <-waited:
				return
			case <-ctx.Done():
				return
			case <-deadline:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	run := func(ctx context.Context, stdin io.Reader, stdout io.Writer) (int, error) {
		go io.Copy(p.Master, stdin)
		copied := make(chan struct{})
		go func() {
			io.Copy(stdout, p.Master)
			close(copied)
		}()
		go func() {
			p.Wait()
			close(waited)
		}()
		select {
		case <-waited:
		case <-ctx.Done():
			killUntilEnded(context.Background(), time.Duration(math.MaxInt64))
		}
		select {
		case <-copied:
		case <-time.After(time.Second):
		}
		p.Master.Close()
		return p.End(stdout), nil
	}
	return Start(p.ID, run, Ops{
		Resize: func(_ context.Context, size backend.TermSize) error {
			return pty.SetSize(p.Master, size.Rows, size.Cols)
		},
		Kill: func(ctx context.Context) error {
			killUntilEnded(ctx, 10*time.Second)
			return nil
		},
	})
}

// Ended is a terminal whose program never ran: it shows output (why) and
// ends with code, as a shell reports a command that could not start.
func Ended(id, output string, code int) *Terminal {
	return Start(id, func(_ context.Context, _ io.Reader, stdout io.Writer) (int, error) {
		io.WriteString(stdout, output)
		return code, nil
	}, Ops{
		Resize: func(context.Context, backend.TermSize) error { return nil },
		Kill:   func(context.Context) error { return nil },
	})
}
