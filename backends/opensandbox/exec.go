package opensandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// How Exec works
//
// execd's command stream is not byte-exact: it reports output line by line,
// without line ends and with invalid UTF-8 replaced, and its commands have
// no stdin. So Exec runs each command through a small sh wrapper that
// sends the command's stdout and stderr to files in a directory of its own
// under the sandbox's TMPDIR, which the backend reads with ranged downloads
// while the command runs (binary-clean, streaming, and never more than the
// output cap is fetched). When the command ends, the wrapper reports the
// files' sizes and, when they are small, their bytes in base64 on the
// stream (see report.go), so a short command needs no download: one
// request runs it and brings its output back. Stdin, when given, is uploaded in pieces that a
// feeder loop in the wrapper writes into a FIFO the command reads. The event
// stream gives the command's id and its end: the wrapper exits with the
// command's status, so execd's exit code is the command's (128+N after
// signal N), and execd's -1 can only mean that execd killed the wrapper
// itself (its millisecond timeout) or someone else did.
//
// A timeout is execd's timeout plus a client deadline a little later. A
// timeout or a cancelled context kills the command's process group and every
// process carrying its marker (see kill), and interrupts it in execd
// (DELETE /command), so nothing it started survives.

// Grace after the request's timeout before the client gives up on execd
// reporting it.
const clientTimeoutGrace = 2 * time.Second

// outputChunk is the most one download of output asks for.
const outputChunk = 4 << 20

// stdinChunk is the most one upload of stdin carries.
const stdinChunk = 1 << 20

// EnvExecID is set in every process of a command run by Exec, with a value
// of its own per command, so the command's processes can be found and
// killed even if they left its process group.
const EnvExecID = "SANDBOXKIT_EXEC_ID"

// setupMarker starts the wrapper's own complaints, on execd's stderr.
const setupMarker = "sandboxkit-setup:"

var envNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// Exec runs one command; see the package documentation.
func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	argv, err := req.Argv()
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	for k := range req.Env {
		if !envNameRE().MatchString(k) {
			return backend.ExecResult{}, s.opErr("exec", fmt.Errorf("%w: environment variable name %q: want letters, digits and '_'", backend.ErrInvalidConfig, k))
		}
	}
	x, err := s.execd(ctx)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", s.gone(ctx, err))
	}
	p, err := s.probe(ctx)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", s.gone(ctx, err))
	}
	cred, err := s.credential(ctx, req.User)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	execID, err := randomHex(8)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	wd := req.WorkDir
	switch {
	case wd == "":
		wd = p.workDir
	case !path.IsAbs(wd):
		wd = path.Join(p.workDir, wd)
	}
	r := &execRun{
		s: s, x: x, req: req, argv: argv, cred: cred, workDir: wd, execID: execID,
		base: path.Join(p.tmpDir, ".sbx-exec-"+execID),
	}
	if req.Stdin != nil {
		r.inDir = r.base + "-in"
	}
	res, err := r.run(ctx)
	if err != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			err = s.gone(ctx, err)
		}
		return res, s.opErr("exec", err)
	}
	return res, nil
}

// execRun is one Exec.
type execRun struct {
	s       *Sandbox
	x       *execd
	req     backend.ExecRequest
	argv    []string
	cred    credential
	workDir string
	base    string // the wrapper's files are base.out, .err, .pgid (and .in)
	inDir   string // where stdin pieces are uploaded ("" without stdin)
	execID  string // value of EnvExecID in the command's processes

	idMu    sync.Mutex
	id      string
	idKnown chan struct{}
}

func (r *execRun) setID(id string) {
	r.idMu.Lock()
	defer r.idMu.Unlock()
	if r.id == "" {
		r.id = id
		close(r.idKnown)
	}
}

// commandID waits up to d for the init event's id.
func (r *execRun) commandID(d time.Duration) string {
	select {
	case <-r.idKnown:
	case <-time.After(d):
	}
	r.idMu.Lock()
	defer r.idMu.Unlock()
	return r.id
}

func (r *execRun) run(ctx context.Context) (backend.ExecResult, error) {
	r.idKnown = make(chan struct{})
	start := time.Now()
	out := backend.NewOutputs(r.req)
	combined := sameWriter(r.req.Stdout, r.req.Stderr)
	body := runCommandRequest{Command: r.script(combined), Cwd: r.workDir, UID: r.cred.uid, GID: r.cred.gid}
	if r.req.Timeout > 0 {
		body.Timeout = max(r.req.Timeout.Milliseconds(), 1)
	}

	// The stream lives until we are done with it, not until ctx ends:
	// closing it does not stop the command, interrupting does.
	streamCtx, stopStream := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStream()
	stream, err := r.x.runCommand(streamCtx, body)
	if err != nil {
		if ctx.Err() != nil {
			return backend.ExecResult{}, ctx.Err()
		}
		return backend.ExecResult{}, err
	}
	defer stream.Close()

	termCh := make(chan terminal, 1)
	go func() {
		oc, err := readEventsKeeping(stream, r.setID, reportMaxText)
		termCh <- terminal{oc, err}
	}()

	poll := newPoller(r, out, combined)
	finish := make(chan struct{})
	pollCtx, stopPoll := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPoll()
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		poll.run(pollCtx, finish)
	}()

	stdinCtx, stopStdin := context.WithCancel(context.WithoutCancel(ctx))
	defer stopStdin()
	if r.inDir != "" {
		go r.feedStdin(stdinCtx)
	}

	term, ctxErr, timedOut := r.wait(ctx, termCh, start)
	stopStdin()

	// A broken stream leaves the command running: end it too, unless the
	// sandbox itself is gone.
	if term.err != nil {
		term.err = r.s.gone(ctx, term.err)
	}
	if ctxErr != nil || timedOut || (term.err != nil && !errors.Is(term.err, backend.ErrNotFound)) {
		r.kill(ctx)
	}
	stopStream()

	// Collect the rest of the output: all of it after a normal end (from
	// the wrapper's report when it holds it), what is there after a
	// cancel (briefly: the caller is waiting).
	if term.oc != nil && term.oc.done && ctxErr == nil && !timedOut {
		poll.report = parseReport(term.oc.stdout.String(), r.execID)
	}
	close(finish)
	drainBound := 2 * time.Minute
	if ctxErr != nil {
		drainBound = 5 * time.Second
	}
	select {
	case <-pollDone:
	case <-time.After(drainBound):
		stopPoll()
		<-pollDone
	}
	r.cleanup(ctx)

	res := backend.ExecResult{Duration: time.Since(start), Truncated: poll.truncated}
	if res.Duration <= 0 {
		res.Duration = time.Nanosecond
	}
	out.Finish(&res)
	return commandResult(res, term, ctxErr, timedOut, poll.err)
}

// terminal is how a command's event stream ended: with the command's
// outcome, or broken.
type terminal struct {
	oc  *outcome
	err error
}

// wait waits for the event stream to end (termCh), ctx to end or, with a
// timeout, for execd's own timeout to have had its chance. It returns the
// stream's end, ctx's error, and whether the command timed out: the
// deadline passed, or execd's timeout killed the wrapper.
func (r *execRun) wait(ctx context.Context, termCh <-chan terminal, start time.Time) (term terminal, ctxErr error, timedOut bool) {
	var deadline <-chan time.Time
	if r.req.Timeout > 0 {
		t := time.NewTimer(r.req.Timeout + clientTimeoutGrace)
		defer t.Stop()
		deadline = t.C
	}
	select {
	case term = <-termCh:
	case <-ctx.Done():
		ctxErr = ctx.Err()
	case <-deadline:
		timedOut = true
	}
	if term.oc != nil && term.oc.done && term.oc.exitCode == -1 && r.req.Timeout > 0 &&
		time.Since(start) >= r.req.Timeout-10*time.Millisecond {
		timedOut = true // execd's timeout killed the wrapper
	}
	return term, ctxErr, timedOut
}

// commandResult completes res (output and duration in place) from how the
// command ended, in order: cancelled, timed out, a broken stream, a
// wrapper that could not set up, then the command's own outcome; an error
// reading its output comes last.
func commandResult(res backend.ExecResult, term terminal, ctxErr error, timedOut bool, pollErr error) (backend.ExecResult, error) {
	switch {
	case ctxErr != nil:
		return res, ctxErr
	case timedOut:
		res.ExitCode, res.TimedOut = backend.TimeoutExitCode, true
		if pollErr != nil {
			return res, fmt.Errorf("the command timed out, and reading its output failed: %w", pollErr)
		}
		return res, nil
	case term.err != nil:
		return res, term.err
	}
	oc := term.oc
	if msg, ok := setupFailure(oc.stderr.String()); ok {
		return res, errors.New(msg)
	}
	switch {
	case oc.startErr != "":
		return res, fmt.Errorf("execd could not start the command: %s", oc.startErr)
	case oc.exitCode == -1:
		res.ExitCode = signalExit(oc.killedBy)
		if res.ExitCode == 0 {
			return res, fmt.Errorf("the command was killed (%s)", oc.killedBy)
		}
	default:
		res.ExitCode = oc.exitCode
	}
	if pollErr != nil {
		return res, fmt.Errorf("reading the command's output: %w", pollErr)
	}
	return res, nil
}

// kill ends a command that timed out or was cancelled, with everything it
// started. execd's timeout kills the wrapper alone, and its interrupt
// (DELETE /command) sends SIGTERM to the process group and then waits up to
// 3 s for the group to vanish, which it never does in a sandbox whose PID 1
// does not reap orphans (tail -f /dev/null, the usual entrypoint). So the
// group and every process carrying the command's marker are sent SIGKILL by
// a short command, and the interrupt is sent without waiting for its answer
// (it also tells execd the command is over).
func (r *execRun) kill(ctx context.Context) {
	id := r.commandID(2 * time.Second)
	interrupted := make(chan struct{})
	if id != "" {
		go func() {
			defer close(interrupted)
			ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			defer cancel()
			if err := r.x.interrupt(ictx, id); err != nil && ictx.Err() == nil {
				r.s.b.log.Debug("interrupting a command", "sandbox", r.s.id, "command", id, "err", err)
			}
		}()
	} else {
		close(interrupted)
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	script := fmt.Sprintf(`p=$(cat %s 2>/dev/null) && [ -n "$p" ] && kill -KILL -- "-$p" 2>/dev/null
for e in $(grep -lsxz %s /proc/[0-9]*/environ 2>/dev/null); do q=${e#/proc/}; kill -KILL "${q%%%%/*}" 2>/dev/null; done
exit 0`, shellQuote(r.file("pgid")), shellQuote(EnvExecID+"="+r.execID))
	if _, err := r.s.runQuick(kctx, script); err != nil {
		r.s.b.log.Warn("killing a command's processes; waiting for execd's interrupt instead", "sandbox", r.s.id, "err", err)
		<-interrupted
	}
}

func setupFailure(stderr string) (string, bool) {
	i := strings.Index(stderr, setupMarker)
	if i < 0 {
		return "", false
	}
	line, _, _ := strings.Cut(stderr[i+len(setupMarker):], "\n")
	return "preparing the command in the sandbox: " + strings.TrimSpace(line), true
}

// sameWriter reports whether the request's two writers are one, so the
// command's stdout and stderr can share a file and keep their order.
func sameWriter(a, b io.Writer) bool {
	if a == nil || b == nil {
		return false
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// script is the sh wrapper execd runs (with bash -c).
func (r *execRun) script(combined bool) string {
	var b strings.Builder
	b.WriteString("unset " + envExecdToken + "\n")
	// Files beside one another, not a directory of their own: no mkdir
	// process on every command (TMPDIR exists but once).
	fmt.Fprintf(&b, "d=%s\n", shellQuote(r.base))
	fmt.Fprintf(&b, `{ [ -d "${d%%/*}" ] || mkdir -p "${d%%/*}"; } 2>/dev/null; { : > "$d.out" && : > "$d.err" && echo $$ > "$d.pgid"; } 2>/dev/null || { echo "%s cannot create $d.out (is the sandbox's TMPDIR writable?)" >&2; exit 255; }`+"\n", setupMarker)
	stdin := "/dev/null"
	if r.inDir != "" {
		stdin = `"$d.in"`
		fmt.Fprintf(&b, "s=%s\n", shellQuote(r.inDir))
		fmt.Fprintf(&b, `mkfifo "$d.in" || { echo "%s mkfifo $d.in failed (stdin needs mkfifo in the image)" >&2; exit 255; }`+"\n", setupMarker)
		// The feeder writes stdin's pieces in order as they arrive;
		// "eof" is uploaded after the last one.
		b.WriteString(`(
  i=0
  while :; do
    if [ -f "$s/$i" ]; then cat "$s/$i" || exit 0; i=$((i+1))
    elif [ -f "$s/eof" ]; then [ -f "$s/$i" ] || exit 0
    else sleep 0.02 2>/dev/null || sleep 1
    fi
  done
) > "$d.in" &
f=$!
`)
	}
	// The subshell execs the argv (no shell builtins, as in docker exec);
	// the wrapper waits and exits with its status, 128+N after signal N.
	b.WriteString("(")
	fmt.Fprintf(&b, " export %s=%s;", EnvExecID, r.execID)
	for _, k := range sortedKeys(r.req.Env) {
		fmt.Fprintf(&b, " export %s=%s;", k, shellQuote(r.req.Env[k]))
	}
	b.WriteString(" exec")
	for _, a := range r.argv {
		b.WriteByte(' ')
		b.WriteString(shellQuote(a))
	}
	b.WriteString(" ) <" + stdin)
	if combined {
		b.WriteString(` > "$d.out" 2>&1`)
	} else {
		b.WriteString(` > "$d.out" 2> "$d.err"`)
	}
	b.WriteString("\nrc=$?\n")
	if r.inDir != "" {
		b.WriteString(`kill "$f" 2>/dev/null` + "\n")
	}
	b.WriteString(reportScript(r.execID))
	b.WriteString(`exit "$rc"` + "\n")
	return b.String()
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// feedStdin uploads the request's stdin in pieces for the wrapper's feeder:
// each piece is uploaded under a temporary name and renamed into place, so
// the feeder never sees half of one; "eof" follows the last.
func (r *execRun) feedStdin(ctx context.Context) {
	buf := make([]byte, stdinChunk)
	i := 0
	for {
		n, err := r.req.Stdin.Read(buf)
		if ctx.Err() != nil {
			return
		}
		if n > 0 {
			part := path.Join(r.inDir, "."+strconv.Itoa(i)+".part")
			if uerr := r.x.upload(ctx, part, bytes.NewReader(buf[:n]), 0o644, ""); uerr != nil {
				r.stdinFailed(ctx, uerr)
				return
			}
			if merr := r.x.rename(ctx, part, path.Join(r.inDir, strconv.Itoa(i))); merr != nil {
				r.stdinFailed(ctx, merr)
				return
			}
			i++
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.s.b.log.Warn("reading the command's stdin", "sandbox", r.s.id, "err", err)
			}
			if uerr := r.x.upload(ctx, path.Join(r.inDir, "eof"), strings.NewReader(""), 0o644, ""); uerr != nil && ctx.Err() == nil {
				r.s.b.log.Warn("ending the command's stdin", "sandbox", r.s.id, "err", uerr)
			}
			return
		}
	}
}

func (r *execRun) stdinFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	r.s.b.log.Warn("sending stdin to the command; it sees the end of its input", "sandbox", r.s.id, "err", err)
	_ = r.x.upload(ctx, path.Join(r.inDir, "eof"), strings.NewReader(""), 0o644, "")
}

// file is the path of one of the wrapper's files (out, err, pgid, in).
func (r *execRun) file(name string) string { return r.base + "." + name }

// cleanup removes the wrapper's files, in the background: the command's
// caller does not wait for it, Backend.Close does, and a failure only
// leaves small files in TMPDIR.
func (r *execRun) cleanup(ctx context.Context) {
	files := url.Values{"path": {r.file("out"), r.file("err"), r.file("pgid")}}
	if r.inDir != "" {
		files.Add("path", r.file("in"))
	}
	r.idMu.Lock()
	id := r.id
	r.idMu.Unlock()
	// execd keeps every command's output in /tmp/<id>.stdout and .stderr
	// and never removes them: a request of their own, so that they missing
	// (another execd) cannot fail the removal of the wrapper's files.
	var execdFiles url.Values
	if id != "" && !strings.ContainsAny(id, "/\x00") {
		execdFiles = url.Values{"path": {"/tmp/" + id + ".stdout", "/tmp/" + id + ".stderr"}}
	}
	r.s.b.cleanups.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := r.x.json(ctx, http.MethodDelete, "/files", files, nil, nil); err != nil {
			r.s.b.log.Debug("removing a command's scratch files", "sandbox", r.s.id, "files", r.base+".*", "err", err)
		}
		if execdFiles != nil {
			if err := r.x.json(ctx, http.MethodDelete, "/files", execdFiles, nil, nil); err != nil {
				r.s.b.log.Debug("removing execd's output files of a command", "sandbox", r.s.id, "command", id, "err", err)
			}
		}
		if r.inDir == "" {
			return
		}
		if err := r.x.json(ctx, http.MethodDelete, "/directories", url.Values{"path": {r.inDir}}, nil, nil); err != nil {
			r.s.b.log.Debug("removing a command's stdin directory", "sandbox", r.s.id, "dir", r.inDir, "err", err)
		}
	})
}

// poller copies the command's output files to the request's writers.
type poller struct {
	r         *execRun
	streams   []*outStream // out, then err unless combined
	truncated bool
	err       error // the last download failure, if output may be missing
	// report is the wrapper's report, set before finish is closed.
	report outputReport
}

type outStream struct {
	path  string
	w     io.Writer
	off   int64
	limit int64 // bytes worth fetching (negative: all); past it, only the size matters
}

func newPoller(r *execRun, out *backend.Outputs, combined bool) *poller {
	p := &poller{r: r}
	capLimit := func(w io.Writer) int64 {
		if w != nil {
			return -1 // a caller's writer gets everything
		}
		return r.req.Limit()
	}
	p.streams = append(p.streams, &outStream{path: r.file("out"), w: out.Stdout, limit: capLimit(r.req.Stdout)})
	if !combined {
		p.streams = append(p.streams, &outStream{path: r.file("err"), w: out.Stderr, limit: capLimit(r.req.Stderr)})
	}
	return p
}

// run polls until finish is closed, then reads what is left. The first
// poll waits a moment: most commands end before it, and then the final
// read is all there is to do.
func (p *poller) run(ctx context.Context, finish <-chan struct{}) {
	if p.r.req.Stdout == nil && p.r.req.Stderr == nil {
		// Captured output: nobody sees it before the end, when the
		// wrapper's report usually brings it.
		select {
		case <-finish:
			p.final(ctx)
		case <-ctx.Done():
		}
		return
	}
	const fastest, slowest = 20 * time.Millisecond, 250 * time.Millisecond
	interval := fastest
	for {
		select {
		case <-finish:
			p.final(ctx)
			return
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		moved := false
		for _, st := range p.streams {
			n, _ := p.drain(ctx, st)
			moved = moved || n > 0
		}
		if moved {
			interval = fastest
		} else {
			interval = min(interval*2, slowest)
		}
	}
}

// final reads the rest of each output once the command has ended,
// concurrently when one of them is captured (so the writers are surely
// different: the caller's writers may be one value that sameWriter cannot
// compare, and must not be called from two goroutines at once).
func (p *poller) final(ctx context.Context) {
	errs := make([]error, len(p.streams))
	trunc := make([]bool, len(p.streams))
	one := func(i int) {
		trunc[i], errs[i] = p.finalOne(ctx, i)
	}
	if p.r.req.Stdout == nil || p.r.req.Stderr == nil {
		var wg sync.WaitGroup
		for i := range p.streams {
			wg.Go(func() { one(i) })
		}
		wg.Wait()
	} else {
		for i := range p.streams {
			one(i)
		}
	}
	p.err = errors.Join(errs...)
	for _, t := range trunc {
		p.truncated = p.truncated || t
	}
}

// finalOne reads the rest of output i: from the wrapper's report when it
// holds the file, else with downloads, only when the report's size says
// there is more. It reports whether the output was cut at its cap.
func (p *poller) finalOne(ctx context.Context, i int) (bool, error) {
	st := p.streams[i]
	switch {
	case p.report.complete:
		data := p.report.data[i]
		end := int64(len(data))
		if st.limit >= 0 {
			end = min(end, st.limit)
		}
		if st.off < end {
			n, err := st.w.Write(data[st.off:end])
			st.off += int64(n)
			if err != nil {
				return false, err
			}
		}
		return st.limit >= 0 && int64(len(data)) > st.limit, nil
	case p.report.sized:
		size := p.report.size[i]
		end := size
		if st.limit >= 0 {
			end = min(end, st.limit)
		}
		var err error
		if st.off < end {
			_, err = p.drain(ctx, st)
		}
		return st.limit >= 0 && size > st.limit, err
	}
	_, err := p.drain(ctx, st)
	return p.truncatedAt(ctx, st), err
}

// drain fetches what the file holds past st.off (up to st.limit).
func (p *poller) drain(ctx context.Context, st *outStream) (int64, error) {
	var total int64
	for {
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
		want := int64(outputChunk)
		if st.limit >= 0 {
			want = min(want, st.limit-st.off)
			if want <= 0 {
				return total, nil
			}
		}
		n, err := p.r.x.downloadRange(ctx, st.path, st.off, want, st.w)
		st.off += n
		total += n
		if err != nil || n < want {
			return total, err
		}
	}
}

// truncatedAt reports whether an output the poller stopped fetching at the
// cap has more bytes.
func (p *poller) truncatedAt(ctx context.Context, st *outStream) bool {
	if st.limit < 0 || st.off < st.limit {
		return false
	}
	fi, err := p.r.x.info(ctx, st.path)
	// Without an answer, assume more followed: the cap was reached.
	return err != nil || fi.Size > st.off
}

// probeResult is what a sandbox's first command finds out.
type probeResult struct {
	workDir string // execd's working directory, unless the sandbox has one
	tmpDir  string // $TMPDIR, else /tmp
}

// probe finds the sandbox's default working directory (when its metadata
// has none) and its TMPDIR, once per Sandbox value.
func (s *Sandbox) probe(ctx context.Context) (probeResult, error) {
	s.mu.Lock()
	p := probeResult{workDir: s.workDir, tmpDir: s.tmpDir}
	s.mu.Unlock()
	if p.workDir != "" && p.tmpDir != "" {
		return p, nil
	}
	oc, err := s.runQuick(ctx, `printf 'sbxprobe\001%s\001%s\n' "$(pwd)" "${TMPDIR:-/tmp}"`)
	if err != nil {
		return p, fmt.Errorf("probing the sandbox: %w", err)
	}
	out := oc.stdout.String()
	i := strings.Index(out, "sbxprobe\x01")
	if i < 0 {
		return p, fmt.Errorf("probing the sandbox: unexpected output %q (exit code %d, stderr %q)", out, oc.exitCode, oc.stderr.String())
	}
	line, _, _ := strings.Cut(out[i+len("sbxprobe\x01"):], "\n")
	wd, tmp, _ := strings.Cut(line, "\x01")
	if !path.IsAbs(wd) {
		wd = "/"
	}
	if !path.IsAbs(tmp) {
		tmp = "/tmp"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workDir == "" {
		s.workDir = path.Clean(wd)
	}
	s.tmpDir = path.Clean(tmp)
	return probeResult{workDir: s.workDir, tmpDir: s.tmpDir}, nil
}

// credential is the uid and gid execd runs a command as (nil: execd's own).
type credential struct {
	uid, gid *int
}

var digitsRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9]+$`) })

// credential resolves a user ("name", "uid", "name:group", "uid:gid"; ""
// for the sandbox's default user) to the numeric ids execd takes, asking
// the sandbox for names.
func (s *Sandbox) credential(ctx context.Context, user string) (credential, error) {
	if user == "" {
		user = s.user
	}
	if user == "" {
		return credential{}, nil
	}
	u, g, _ := strings.Cut(user, ":")
	if digitsRE().MatchString(u) && (g == "" || digitsRE().MatchString(g)) {
		return newCredential(u, g), nil
	}
	s.mu.Lock()
	c, ok := s.users[user]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	script := fmt.Sprintf(`u=%s; g=%s
case $u in
  ''|*[!0-9]*) uid=$(id -u "$u" 2>/dev/null) || { echo "no such user $u" >&2; exit 3; }; ugid=$(id -g "$u" 2>/dev/null) ;;
  *) uid=$u; ugid= ;;
esac
case $g in
  '') gid=$ugid ;;
  *[!0-9]*) gid=$(awk -F: -v n="$g" '$1==n {print $3; exit}' /etc/group 2>/dev/null); [ -n "$gid" ] || { echo "no such group $g" >&2; exit 3; } ;;
  *) gid=$g ;;
esac
printf 'sbxuser:%%s:%%s\n' "$uid" "$gid"`, shellQuote(u), shellQuote(g))
	oc, err := s.runQuick(ctx, script)
	if err != nil {
		return credential{}, fmt.Errorf("user %q: %w", user, err)
	}
	out := oc.stdout.String()
	i := strings.Index(out, "sbxuser:")
	if oc.exitCode != 0 || i < 0 {
		return credential{}, fmt.Errorf("%w: user %q: %s", backend.ErrInvalidConfig, user, strings.TrimSpace(oc.stderr.String()+" (no such user or group in the sandbox)"))
	}
	line, _, _ := strings.Cut(out[i+len("sbxuser:"):], "\n")
	uid, gid, _ := strings.Cut(line, ":")
	if !digitsRE().MatchString(uid) || (gid != "" && !digitsRE().MatchString(gid)) {
		return credential{}, fmt.Errorf("user %q: unexpected answer %q", user, line)
	}
	c = newCredential(uid, gid)
	s.mu.Lock()
	if s.users == nil {
		s.users = map[string]credential{}
	}
	s.users[user] = c
	s.mu.Unlock()
	return c, nil
}

func newCredential(uid, gid string) credential {
	var c credential
	if n, err := strconv.Atoi(uid); err == nil {
		c.uid = &n
	}
	if n, err := strconv.Atoi(gid); err == nil && gid != "" {
		c.gid = &n
	}
	return c
}
