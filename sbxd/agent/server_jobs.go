package agent

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/outpipe"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// Background jobs live in StateDir/<id>/: meta.json (what was started),
// out.<offset> (the most recent output, in at most two segments) and
// exit.json once the job ended. The agent that started a job copies its
// output and records its exit; it stays alive after its stream closes
// until its jobs end (Server.WaitJobs), so a job outlives its client, and
// any later agent answers for it from these files.

type jobMeta struct {
	ID       string    `json:"id"`
	Argv     []string  `json:"argv"`
	PID      int       `json:"pid"`
	PIDStart uint64    `json:"pid_start"`
	Started  time.Time `json:"started"`
}

type jobExit struct {
	ExitCode int       `json:"exit_code"`
	Ended    time.Time `json:"ended"`
}

type jobTable struct {
	s  *Server
	wg sync.WaitGroup

	mu   sync.Mutex
	done map[string]chan struct{} // jobs this agent watches, closed at exit
}

func newJobTable(s *Server) *jobTable {
	return &jobTable{s: s, done: map[string]chan struct{}{}}
}

func (t *jobTable) wait() { t.wg.Wait() }

func (t *jobTable) dir(id string) string { return filepath.Join(t.s.opts.StateDir, id) }

func newJobID() string {
	var b [8]byte
	rand.Read(b[:])
	return "job-" + hex.EncodeToString(b[:])
}

func (t *jobTable) start(req sbxdwire.JobRequest) (sbxdwire.JobStatus, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return sbxdwire.JobStatus{}, fmt.Errorf("%w: empty argv", sbxdwire.ErrInvalid)
	}
	id := newJobID()
	dir := t.dir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sbxdwire.JobStatus{}, fmt.Errorf("job state directory: %w", err)
	}
	limit := req.OutputLimit
	if limit <= 0 {
		limit = t.s.opts.JobOutputLimit
	}
	log := &jobLog{dir: dir, half: max(limit/2, 4096)}
	if err := log.open(0); err != nil {
		os.RemoveAll(dir)
		return sbxdwire.JobStatus{}, err
	}
	cmd, err := t.s.command(req.Argv, req.Env, req.Dir, req.User, id)
	if err != nil {
		log.close()
		os.RemoveAll(dir)
		return sbxdwire.JobStatus{}, err
	}
	// A session of its own: the job is not in the agent's process group
	// and outlives it.
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid = true
	out, err := outpipe.New(log)
	if err != nil {
		log.close()
		os.RemoveAll(dir)
		return sbxdwire.JobStatus{}, err
	}
	cmd.Stdout, cmd.Stderr = out.W(), out.W()
	started := time.Now()
	if err := StartCommand(cmd); err != nil {
		out.Close()
		return t.startFailed(id, req.Argv, err, log, started)
	}
	out.Started()
	pid := cmd.Process.Pid
	pidStart, _ := procfs.StartTime(pid)
	meta := jobMeta{ID: id, Argv: req.Argv, PID: pid, PIDStart: pidStart, Started: started}
	if err := writeJSONFile(filepath.Join(dir, "meta.json"), meta); err != nil {
		killTree(pid, id)
	}
	t.follow(id, cmd, out, log)
	return sbxdwire.JobStatus{ID: id, Argv: req.Argv, PID: pid, State: sbxdwire.JobRunning, Started: started}, nil
}

// startFailed records a job whose command could not start as one that
// ended at once, as a shell would report it (see startFailure).
func (t *jobTable) startFailed(id string, argv []string, err error, log *jobLog, started time.Time) (sbxdwire.JobStatus, error) {
	dir := t.dir(id)
	var buf strings.Builder
	res := startFailure(argv[0], err, &buf)
	io.WriteString(log, buf.String())
	log.close()
	writeJSONFile(filepath.Join(dir, "meta.json"), jobMeta{ID: id, Argv: argv, Started: started})
	writeJSONFile(filepath.Join(dir, "exit.json"), jobExit{ExitCode: res.ExitCode, Ended: time.Now()})
	return t.status(id)
}

// follow collects the started job's output from out into log and records
// its exit.
func (t *jobTable) follow(id string, cmd *exec.Cmd, out *outpipe.Pipe, log *jobLog) {
	dir := t.dir(id)
	done := make(chan struct{})
	t.mu.Lock()
	t.done[id] = done
	t.mu.Unlock()
	// Output is collected until every holder of the pipe (the job and
	// anything it left running) closes it; the exit is recorded when the
	// job itself exits and all it wrote is in the log.
	t.wg.Add(2)
	go func() {
		defer t.wg.Done()
		<-out.Done()
		log.close()
	}()
	go func() {
		defer t.wg.Done()
		WaitCommand(cmd)
		out.Settle(waitDelay)
		writeJSONFile(filepath.Join(dir, "exit.json"), jobExit{ExitCode: exitStatus(cmd.ProcessState), Ended: time.Now()})
		t.mu.Lock()
		delete(t.done, id)
		t.mu.Unlock()
		close(done)
	}()
}

func writeJSONFile(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFileAtomic(name, strings.NewReader(string(b)), 0o600)
}

func readJSONFile(name string, v any) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (t *jobTable) status(id string) (sbxdwire.JobStatus, error) {
	if !sbxdwire.ValidID(id) {
		return sbxdwire.JobStatus{}, &fs.PathError{Op: "job", Path: id, Err: fs.ErrNotExist}
	}
	dir := t.dir(id)
	var m jobMeta
	if err := readJSONFile(filepath.Join(dir, "meta.json"), &m); err != nil {
		return sbxdwire.JobStatus{}, &fs.PathError{Op: "job", Path: id, Err: fs.ErrNotExist}
	}
	st := sbxdwire.JobStatus{ID: m.ID, Argv: m.Argv, PID: m.PID, Started: m.Started, State: sbxdwire.JobRunning}
	_, end, _ := logBounds(dir)
	st.Output = end
	var e jobExit
	switch err := readJSONFile(filepath.Join(dir, "exit.json"), &e); {
	case err == nil:
		st.State, st.ExitCode, st.Ended = sbxdwire.JobExited, e.ExitCode, e.Ended
	case !procfs.Alive(m.PID, m.PIDStart):
		// This agent's watcher, when it runs, records the exit once the
		// job's output is in (waitDelay after the exit, or when a slow
		// copy drained the pipe): wait for it rather than call a job that
		// just ended lost.
		t.mu.Lock()
		done := t.done[id]
		t.mu.Unlock()
		if done != nil {
			select {
			case <-done:
			case <-time.After(waitDelay + time.Second):
			}
		}
		// Check again: the watcher may have just written it.
		if readJSONFile(filepath.Join(dir, "exit.json"), &e) == nil {
			st.State, st.ExitCode, st.Ended = sbxdwire.JobExited, e.ExitCode, e.Ended
		} else {
			st.State, st.ExitCode = sbxdwire.JobLost, -1
		}
	}
	return st, nil
}

func (t *jobTable) list() ([]sbxdwire.JobStatus, error) {
	entries, err := os.ReadDir(t.s.opts.StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return []sbxdwire.JobStatus{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []sbxdwire.JobStatus{}
	for _, e := range entries {
		if st, err := t.status(e.Name()); err == nil {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b sbxdwire.JobStatus) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// waitFor waits up to timeout for the job to end and returns its status.
func (t *jobTable) waitFor(r *http.Request, id string, timeout time.Duration) (sbxdwire.JobStatus, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	t.mu.Lock()
	done := t.done[id]
	t.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-deadline.C:
		case <-r.Context().Done():
		}
		return t.status(id)
	}
	// Watched by another (earlier) agent, or already over: poll its files.
	delay := 10 * time.Millisecond
	for {
		st, err := t.status(id)
		if err != nil || st.State != sbxdwire.JobRunning {
			return st, err
		}
		select {
		case <-time.After(delay):
		case <-deadline.C:
			return st, nil
		case <-r.Context().Done():
			return st, r.Context().Err()
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

func (t *jobTable) kill(id string) (sbxdwire.JobStatus, error) {
	st, err := t.status(id)
	if err != nil || st.State != sbxdwire.JobRunning {
		return st, err
	}
	killTree(st.PID, id)
	return st, nil
}

func (s *Server) handleJobStart(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.JobRequest
	if !readJSON(w, r, "job", &req) {
		return
	}
	st, err := s.jobs.start(req)
	if err != nil {
		writeError(w, "job", "", err)
		return
	}
	writeJSON(w, st)
}

func (s *Server) handleJobList(w http.ResponseWriter, r *http.Request) {
	list, err := s.jobs.list()
	if err != nil {
		writeError(w, "jobs", "", err)
		return
	}
	writeJSON(w, list)
}

func (s *Server) handleJobStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.jobs.status(r.PathValue("id"))
	if err != nil {
		writeError(w, "job", r.PathValue("id"), err)
		return
	}
	writeJSON(w, st)
}

func (s *Server) handleJobWait(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ms, _ := strconv.ParseInt(r.URL.Query().Get("timeout_ms"), 10, 64)
	if ms <= 0 || ms > 60_000 {
		ms = 60_000
	}
	if _, err := s.jobs.status(id); err != nil {
		writeError(w, "job", id, err)
		return
	}
	st, err := s.jobs.waitFor(r, id, time.Duration(ms)*time.Millisecond)
	if err != nil {
		writeError(w, "job", id, err)
		return
	}
	writeJSON(w, st)
}

func (s *Server) handleJobKill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.jobs.kill(id); err != nil {
		writeError(w, "job", id, err)
		return
	}
	st, err := s.jobs.waitFor(r, id, 5*time.Second)
	if err != nil {
		writeError(w, "job", id, err)
		return
	}
	writeJSON(w, st)
}

// maxJobRead bounds one read of a job's output.
const maxJobRead = 4 << 20

func (s *Server) handleJobOutput(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := s.jobs.status(id)
	if err != nil {
		writeError(w, "job", id, err)
		return
	}
	cursor, _ := strconv.ParseInt(r.URL.Query().Get("cursor"), 10, 64)
	n, _ := strconv.ParseInt(r.URL.Query().Get("max"), 10, 64)
	if n <= 0 || n > maxJobRead {
		n = maxJobRead
	}
	data, next, dropped, err := readLog(s.jobs.dir(id), max(cursor, 0), n)
	if err != nil {
		writeError(w, "job", id, err)
		return
	}
	w.Header().Set(sbxdwire.HdrNextCursor, strconv.FormatInt(next, 10))
	w.Header().Set(sbxdwire.HdrDropped, strconv.FormatInt(dropped, 10))
	w.Header().Set(sbxdwire.HdrJobState, st.State)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(data)
}

// jobLog keeps the most recent output of a job in two segment files of up
// to half bytes each, named by the offset of their first byte: when the
// current one is full, the older is removed and a new one begun.
type jobLog struct {
	dir      string
	half     int64
	segStart int64
	segSize  int64
	f        *os.File
}

func segName(dir string, off int64) string { return filepath.Join(dir, fmt.Sprintf("out.%020d", off)) }

func (l *jobLog) open(off int64) error {
	f, err := os.OpenFile(segName(l.dir, off), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	l.f, l.segStart, l.segSize = f, off, 0
	return nil
}

func (l *jobLog) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if l.segSize >= l.half {
			if err := l.rotate(); err != nil {
				return total - len(p), err
			}
		}
		n := min(int64(len(p)), l.half-l.segSize)
		m, err := l.f.Write(p[:n])
		l.segSize += int64(m)
		p = p[m:]
		if err != nil {
			return total - len(p), err
		}
	}
	return total, nil
}

func (l *jobLog) rotate() error {
	segs, _ := listSegments(l.dir)
	l.f.Close()
	for _, s := range segs {
		if s.off < l.segStart {
			os.Remove(segName(l.dir, s.off))
		}
	}
	return l.open(l.segStart + l.segSize)
}

func (l *jobLog) close() {
	if l.f != nil {
		l.f.Close()
	}
}

type segment struct{ off, size int64 }

func listSegments(dir string) ([]segment, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []segment
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "out.")
		if !ok {
			continue
		}
		off, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		segs = append(segs, segment{off, fi.Size()})
	}
	slices.SortFunc(segs, func(a, b segment) int { return int(a.off - b.off) })
	return segs, nil
}

// logBounds returns the offsets of the first byte kept and of the end.
func logBounds(dir string) (int64, int64, error) {
	segs, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		return 0, 0, err
	}
	last := segs[len(segs)-1]
	return segs[0].off, last.off + last.size, nil
}

// readLog reads up to n bytes from cursor. Bytes before the first one kept
// are reported as dropped and skipped.
func readLog(dir string, cursor, n int64) (data []byte, next, dropped int64, err error) {
	for range 3 { // a rotation may remove a segment between listing and reading
		segs, err := listSegments(dir)
		if err != nil {
			return nil, cursor, 0, err
		}
		if len(segs) == 0 {
			return nil, cursor, 0, nil
		}
		if first := segs[0].off; cursor < first {
			dropped, cursor = first-cursor, first
		}
		last := segs[len(segs)-1]
		cursor = min(cursor, last.off+last.size)
		data = data[:0]
		pos := cursor
		retry := false
		for _, s := range segs {
			if int64(len(data)) >= n || pos >= s.off+s.size {
				continue
			}
			f, err := os.Open(segName(dir, s.off))
			if err != nil {
				retry = true
				break
			}
			buf := make([]byte, min(n-int64(len(data)), s.off+s.size-pos))
			m, _ := f.ReadAt(buf, pos-s.off)
			f.Close()
			data = append(data, buf[:m]...)
			pos += int64(m)
			if int64(m) < int64(len(buf)) {
				break
			}
		}
		if !retry {
			return data, pos, dropped, nil
		}
	}
	return nil, cursor, 0, errors.New("job output is being rotated too fast to read; try again")
}
