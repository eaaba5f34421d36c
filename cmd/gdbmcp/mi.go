package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// record is one line of gdb's machine interface (MI) output, parsed:
// `TOKEN^done,k=v`, `*stopped,reason="..."`, `~"console text"`, ...
type record struct {
	token int    // -1: none
	kind  byte   // '^' result, '*' exec async, '+' status, '=' notify, '~' console, '@' target, '&' log
	class string // "done", "running", "error", "stopped", ... ("" for streams)
	vals  map[string]any
	text  string // stream records: the decoded c-string
}

// str returns the string value at key ("" when missing or not a string).
func (r record) str(key string) string {
	s, _ := r.vals[key].(string)
	return s
}

// parseRecord parses one MI output line. ok is false for lines that are
// not MI (the prompt, or stray output).
func parseRecord(line string) (r record, ok bool) {
	line = strings.TrimRight(line, "\r\n")
	r.token = -1
	i := 0
	for i < len(line) && line[i] >= '0' && line[i] <= '9' {
		i++
	}
	if i > 0 {
		r.token, _ = strconv.Atoi(line[:i])
	}
	if i >= len(line) {
		return r, false
	}
	r.kind = line[i]
	rest := line[i+1:]
	switch r.kind {
	case '~', '@', '&':
		p := &miParser{s: rest}
		s, err := p.cstring()
		if err != nil {
			return r, false
		}
		r.text = s
		return r, true
	case '^', '*', '+', '=':
		class, results, _ := strings.Cut(rest, ",")
		r.class = class
		p := &miParser{s: results}
		vals, err := p.results()
		if err != nil {
			return r, false
		}
		r.vals = vals
		return r, true
	}
	return r, false
}

// miParser parses MI values: c-strings, tuples {a=..} and lists [..].
type miParser struct {
	s string
	i int
}

func (p *miParser) results() (map[string]any, error) {
	out := map[string]any{}
	for p.i < len(p.s) {
		k, v, err := p.result()
		if err != nil {
			return out, err
		}
		out[k] = v
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
		}
	}
	return out, nil
}

func (p *miParser) result() (string, any, error) {
	eq := strings.IndexByte(p.s[p.i:], '=')
	if eq < 0 {
		return "", nil, fmt.Errorf("mi: no '=' at %q", p.s[p.i:])
	}
	k := p.s[p.i : p.i+eq]
	p.i += eq + 1
	v, err := p.value()
	return k, v, err
}

func (p *miParser) value() (any, error) {
	if p.i >= len(p.s) {
		return nil, errors.New("mi: value expected")
	}
	switch p.s[p.i] {
	case '"':
		return p.cstring()
	case '{':
		p.i++
		m := map[string]any{}
		for p.i < len(p.s) && p.s[p.i] != '}' {
			k, v, err := p.result()
			if err != nil {
				return nil, err
			}
			m[k] = v
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
			}
		}
		p.i++
		return m, nil
	case '[':
		p.i++
		var l []any
		for p.i < len(p.s) && p.s[p.i] != ']' {
			var v any
			var err error
			// Lists hold values or results (name=value); keep the values.
			if c := p.s[p.i]; c != '"' && c != '{' && c != '[' {
				_, v, err = p.result()
			} else {
				v, err = p.value()
			}
			if err != nil {
				return nil, err
			}
			l = append(l, v)
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
			}
		}
		p.i++
		return l, nil
	}
	return nil, fmt.Errorf("mi: unexpected %q", p.s[p.i:])
}

// cstring decodes a C string literal starting at p.i.
func (p *miParser) cstring() (string, error) {
	if p.i >= len(p.s) || p.s[p.i] != '"' {
		return "", errors.New("mi: string expected")
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch c {
		case '"':
			return b.String(), nil
		case '\\':
			if p.i >= len(p.s) {
				return "", errors.New("mi: bad escape")
			}
			e := p.s[p.i]
			p.i++
			switch e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0', '1', '2', '3', '4', '5', '6', '7':
				// Up to three octal digits.
				n := int(e - '0')
				for k := 0; k < 2 && p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '7'; k++ {
					n = n*8 + int(p.s[p.i]-'0')
					p.i++
				}
				b.WriteByte(byte(n))
			default:
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("mi: unterminated string")
}

// quoteMI quotes s as a C string for an MI command argument.
func quoteMI(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// gdbProc is one gdb process driven over MI. Commands are serialised; the
// reader goroutine hands result records to the waiting command, collects
// console output for it, and queues *stopped records.
type gdbProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when gdb's output ends

	mu      sync.Mutex // one command at a time
	token   int
	outMu   sync.Mutex
	console strings.Builder
	waiters map[int]chan record
	stopped chan record
	exitErr error
	running bool // the program runs: between *running and *stopped (or its exit)
}

// answerTimeout bounds the wait for gdb's answer to one command, so that a
// gdb that stopped reading cannot hold the server forever.
const answerTimeout = 2 * time.Minute

// asyncSettings make gdb keep reading commands while the program runs
// (MI's async mode; target-async is its name before gdb 7.8), so that
// -exec-interrupt, kill and print work on a running program.
var asyncSettings = []string{"-gdb-set mi-async on", "-gdb-set target-async on"}

// startGDB starts gdb in MI mode; it reads its init files (an image's
// gdbinit: pwndbg, gef) unless noInit.
func startGDB(gdb, workDir string, noInit bool) (*gdbProc, error) {
	args := []string{"--interpreter=mi3", "-q"}
	if noInit {
		args = append(args, "-nx")
	}
	cmd := exec.Command(gdb, args...)
	cmd.Dir = workDir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", gdb, err)
	}
	g := &gdbProc{cmd: cmd, stdin: stdin, done: make(chan struct{}),
		waiters: map[int]chan record{}, stopped: make(chan record, 16)}
	go g.read(stdout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []string{"-gdb-set pagination off", "-gdb-set confirm off", "-gdb-set disable-randomization off"} {
		if _, _, err := g.run(ctx, c); err != nil {
			g.close()
			return nil, fmt.Errorf("%s: %s: %w", gdb, c, err)
		}
	}
	var errs []error
	for _, c := range asyncSettings {
		_, _, err := g.run(ctx, c)
		if err == nil {
			return g, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", c, err))
	}
	g.close()
	return nil, fmt.Errorf("%s cannot run in MI's async mode, without which a running program cannot be interrupted: %w", gdb, errors.Join(errs...))
}

func (g *gdbProc) read(r io.Reader) {
	defer close(g.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		rec, ok := parseRecord(sc.Text())
		if !ok {
			continue // the prompt, or stray output
		}
		switch rec.kind {
		case '~', '@':
			g.outMu.Lock()
			g.console.WriteString(rec.text)
			g.outMu.Unlock()
		case '^':
			g.outMu.Lock()
			w := g.waiters[rec.token]
			delete(g.waiters, rec.token)
			g.outMu.Unlock()
			if w != nil {
				w <- rec
			}
		case '=':
			if rec.class == "thread-group-exited" {
				g.setRunning(false)
			}
		case '*':
			switch rec.class {
			case "running":
				g.setRunning(true)
			case "stopped":
				g.setRunning(false)
				select {
				case g.stopped <- rec:
				default: // nobody waits; keep the newest few
					<-g.stopped
					g.stopped <- rec
				}
			}
		}
	}
	g.outMu.Lock()
	g.exitErr = errors.New("gdb exited")
	g.outMu.Unlock()
}

func (g *gdbProc) setRunning(v bool) {
	g.outMu.Lock()
	g.running = v
	g.outMu.Unlock()
}

// isRunning reports whether the program runs (as gdb last said).
func (g *gdbProc) isRunning() bool {
	g.outMu.Lock()
	defer g.outMu.Unlock()
	return g.running
}

// alive reports whether gdb's output is still open.
func (g *gdbProc) alive() bool {
	select {
	case <-g.done:
		return false
	default:
		return true
	}
}

// run sends one MI command and waits for its result record. It returns
// the record, the console output written meanwhile, and an error for
// ^error results.
func (g *gdbProc) run(ctx context.Context, command string) (record, string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	g.token++
	tok := g.token
	ch := make(chan record, 1)
	g.outMu.Lock()
	g.waiters[tok] = ch
	g.console.Reset()
	g.outMu.Unlock()
	defer func() {
		g.outMu.Lock()
		delete(g.waiters, tok)
		g.outMu.Unlock()
	}()
	if _, err := fmt.Fprintf(g.stdin, "%d%s\n", tok, command); err != nil {
		return record{}, "", fmt.Errorf("writing to gdb: %w", err)
	}
	select {
	case rec := <-ch:
		g.outMu.Lock()
		out := g.console.String()
		g.outMu.Unlock()
		if rec.class == "error" {
			return rec, out, errors.New(rec.str("msg"))
		}
		return rec, out, nil
	case <-g.done:
		return record{}, "", errors.New("gdb exited")
	case <-ctx.Done():
		return record{}, "", fmt.Errorf("waiting for gdb to answer %q: %w", command, ctx.Err())
	}
}

// drainStopped forgets queued stop events, before a command that waits
// for the next one.
func (g *gdbProc) drainStopped() {
	for {
		select {
		case <-g.stopped:
		default:
			return
		}
	}
}

// waitStopped waits for the next *stopped record.
func (g *gdbProc) waitStopped(ctx context.Context) (record, bool) {
	select {
	case rec := <-g.stopped:
		return rec, true
	case <-g.done:
		return record{}, false
	case <-ctx.Done():
		return record{}, false
	}
}

// interrupt stops a running program (SIGINT to the inferior through gdb).
func (g *gdbProc) interrupt(ctx context.Context) error {
	_, _, err := g.run(ctx, "-exec-interrupt")
	return err
}

func (g *gdbProc) close() {
	g.stdin.Close()
	select {
	case <-g.done:
	case <-time.After(5 * time.Second):
		g.cmd.Process.Kill()
	}
	g.cmd.Wait()
}
