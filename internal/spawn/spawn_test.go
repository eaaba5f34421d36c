package spawn

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/childpipe"
)

// run starts argv by Start with its output through a pipe (stdin
// /dev/null), waits, and returns what it wrote and its exit code.
func run(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	r, w, err := childpipe.ForOutput()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, err := childpipe.DevNull()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, w, w
	err = Start(cmd)
	w.Close()
	if err != nil {
		t.Fatalf("Start %v: %v", cmd.Args, err)
	}
	out, _ := io.ReadAll(r)
	werr := cmd.Wait()
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		t.Fatalf("Wait: %v", werr)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// fast runs f and reports whether it started (or tried to start) exactly
// one command by the fast path.
func fast(f func()) bool {
	before := fastStarts.Load()
	f()
	return fastStarts.Load() == before+1
}

// TestMain gives the tests the fast path where the runtime raised the limit
// of open files (soft below hard when the test started), which Start
// leaves to os/exec: a limit the program sets itself is its children's.
func TestMain(m *testing.M) {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur != l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	if (runtime.GOOS == "linux" && runtime.GOARCH == "amd64") != Available() {
		fmt.Fprintln(os.Stderr, "spawn: no fast path on linux/amd64")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func command(t *testing.T, script string) *exec.Cmd {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	return exec.Command(sh, "-c", script)
}

func TestOutputExitCodeEnvDir(t *testing.T) {
	dir := t.TempDir()
	cmd := command(t, `echo out; echo err >&2; echo "$SPAWN_TEST"; pwd; exit 3`)
	cmd.Env = []string{"SPAWN_TEST=from the env", "PATH=/usr/bin:/bin"}
	cmd.Dir = dir
	var out string
	var code int
	if !fast(func() { out, code = run(t, cmd) }) && Available() {
		t.Error("not started by the fast path")
	}
	if want := "out\nerr\nfrom the env\n" + dir + "\n"; out != want || code != 3 {
		t.Errorf("got %q, exit %d; want %q, exit 3", out, code, want)
	}
}

// The program starts with the signals os/exec would give it: none blocked
// or caught, those this process ignores ignored (SIGUSR2 here; SIGHUP too
// under nohup), in a process group of its own.
func TestSignalsAndGroup(t *testing.T) {
	signal.Ignore(syscall.SIGUSR2)
	// Builtins only: a shell blocks signals while it starts a child.
	const sigs = `while read -r k v; do case $k in SigBlk:|SigIgn:|SigCgt:) echo "$k $v";; esac; done < /proc/$$/status`
	cmd := command(t, sigs+`; read -r s < /proc/$$/stat; echo "$s"`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out string
	if !fast(func() { out, _ = run(t, cmd) }) && Available() {
		t.Error("not started by the fast path")
	}
	// Compare with os/exec's own start of the same command.
	ref := command(t, sigs)
	ref.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	want, err := ref.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("output %q", out)
	}
	if got := strings.Join(lines[:3], "\n") + "\n"; got != string(want) {
		t.Errorf("signal state %q, os/exec gives %q", got, want)
	}
	if f := strings.Fields(lines[0]); strings.Trim(f[1], "0") != "" {
		t.Errorf("%s: want none", lines[0])
	}
	if ign, err := strconv.ParseUint(strings.Fields(lines[1])[1], 16, 64); err != nil || ign&(1<<(syscall.SIGUSR2-1)) == 0 {
		t.Errorf("%s: SIGUSR2 is not ignored", lines[1])
	}
	f := strings.Fields(lines[3])
	if len(f) < 5 || f[0] != f[4] {
		t.Errorf("stat %q: process group is not the process's own", lines[3])
	}
}

func TestStartFailures(t *testing.T) {
	notExec := t.TempDir() + "/plain"
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
	}{
		{"/nonexistent/program", os.ErrNotExist},
		{notExec, os.ErrPermission},
	} {
		cmd := exec.Command(tc.path)
		null, err := childpipe.DevNull()
		if err != nil {
			t.Fatal(err)
		}
		r, w, err := childpipe.ForOutput()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = null, w, w
		if !fast(func() { err = Start(cmd) }) && Available() {
			t.Error("not started by the fast path")
		}
		w.Close()
		r.Close()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.path, err, tc.want)
		}
		if cmd.Process != nil {
			t.Errorf("%s: a process after a failed start", tc.path)
		}
	}
	// A working directory that is not there (os/exec checks it before
	// its fork; the fast path learns it from the child).
	cmd := exec.Command("/bin/sh", "-c", "true")
	cmd.Dir = t.TempDir() + "/gone"
	null, _ := childpipe.DevNull()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	err := Start(cmd)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "chdir" || pe.Path != cmd.Dir || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("start in a missing directory: %v, want chdir %s: no such file or directory", err, cmd.Dir)
	}
	// The failed children were reaped.
	if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); err != syscall.ECHILD {
		t.Errorf("wait4 after failed starts: pid %d, %v; want no child", pid, err)
	}
}

func TestCredential(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	cmd := command(t, `id -u; id -g; id -G`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65533, Groups: []uint32{65532}}}
	var out string
	if !fast(func() { out, _ = run(t, cmd) }) && Available() {
		t.Error("not started by the fast path")
	}
	if f := strings.Fields(out); len(f) < 3 || f[0] != "65534" || f[1] != "65533" || !strings.Contains(out, "65532") {
		t.Errorf("id: %q", out)
	}
}

// Anything os/exec does more than start a process goes to Cmd.Start.
func TestFallback(t *testing.T) {
	var buf bytes.Buffer
	cmd := command(t, `echo through a copy`)
	cmd.Stdout = &buf
	if fast(func() {
		if err := Start(cmd); err != nil {
			t.Fatal(err)
		}
	}) {
		t.Error("a command writing to a buffer took the fast path")
	}
	if err := cmd.Wait(); err != nil || buf.String() != "through a copy\n" {
		t.Errorf("%q, %v", buf.String(), err)
	}
	for name, c := range map[string]*exec.Cmd{
		"relative path": {Path: "sh", Args: []string{"sh"}},
		"ctty":          {Path: "/bin/sh", Args: []string{"sh"}, SysProcAttr: &syscall.SysProcAttr{Setctty: true}},
		"extra files":   {Path: "/bin/sh", Args: []string{"sh"}, ExtraFiles: []*os.File{os.Stdin}},
	} {
		c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
		if eligible(c) {
			t.Errorf("%s: eligible", name)
		}
	}
}

// Many commands started at once from many goroutines, with the runtime
// busy: each gets its own output and exit code.
func TestConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 400)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				n := g*100 + i
				cmd := command(t, "echo "+strconv.Itoa(n)+"; exit "+strconv.Itoa(n%7))
				out, code := run(t, cmd)
				if out != strconv.Itoa(n)+"\n" || code != n%7 {
					errs <- "command " + strconv.Itoa(n) + ": " + strconv.Quote(out) + " exit " + strconv.Itoa(code)
				}
				_ = make([]byte, 64<<10) // keep the collector busy
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// The environment is os/exec's: of two entries with one name the last, and
// PWD set to the directory when the command has no environment of its own.
func TestEnvironmentAsOsExec(t *testing.T) {
	dir := t.TempDir()
	for name, env := range map[string][]string{
		"duplicates": {"A=first", "PATH=/usr/bin:/bin", "B=kept", "A=second"},
		"inherited":  nil,
	} {
		t.Run(name, func(t *testing.T) {
			// env itself, not a shell, which would tidy the environment.
			envPath, err := exec.LookPath("env")
			if err != nil {
				t.Skip("no env")
			}
			mk := func() *exec.Cmd {
				cmd := exec.Command(envPath)
				cmd.Env, cmd.Dir = env, dir
				return cmd
			}
			var got string
			if !fast(func() { got, _ = run(t, mk()) }) && Available() {
				t.Error("not started by the fast path")
			}
			want, err := mk().Output()
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("environment:\n%s\nos/exec gives:\n%s", got, want)
			}
			if env != nil && (!strings.Contains(got, "A=second\n") || strings.Contains(got, "A=first")) {
				t.Errorf("A is not the last entry's value:\n%s", got)
			}
			if env == nil && !strings.Contains(got, "PWD="+dir+"\n") {
				t.Errorf("no PWD=%s:\n%s", dir, got)
			}
		})
	}
	// What os/exec treats in ways of its own goes to it.
	for _, env := range [][]string{{"A=x\x00y"}, {"=x"}, {"novalue"}} {
		if _, ok := environ(&exec.Cmd{Env: env}); ok {
			t.Errorf("environ(%q) took the fast path", env)
		}
	}
}

// The environment handed to a child, from entries a request may carry:
// when environ takes it, every name appears once, with its last value, in
// the order of those last entries, and nothing os/exec would refuse or
// treat its own way gets through.
func FuzzEnviron(f *testing.F) {
	f.Add("A=1\nB=2\nA=3")
	f.Add("PATH=/bin\nHOME=/root\nPATH=/usr/bin:/bin")
	f.Add("=x\nA=1")
	f.Add("A\nB=1")
	f.Add("A=x\x00y")
	f.Add("A==1\nA=2=3")
	f.Fuzz(func(t *testing.T, joined string) {
		env := strings.Split(joined, "\n")
		got, ok := environ(&exec.Cmd{Env: env})
		if !ok {
			return
		}
		lastAt := map[string]int{}
		for i, kv := range env {
			name, _, found := strings.Cut(kv, "=")
			if !found || name == "" || strings.IndexByte(kv, 0) >= 0 {
				t.Fatalf("environ took %q", kv)
			}
			lastAt[name] = i
		}
		var want []string
		for i, kv := range env {
			name, _, _ := strings.Cut(kv, "=")
			if lastAt[name] == i {
				want = append(want, kv)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") || len(got) != len(want) {
			t.Fatalf("environ(%q) = %q, want %q", env, got, want)
		}
	})
}
