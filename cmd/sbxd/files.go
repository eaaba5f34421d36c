//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/sandboxkit/sandboxkit/internal/errdefs"
	"github.com/sandboxkit/sandboxkit/internal/hostfs"
)

// Exit codes of the file commands, shared with package backend's fallback
// scripts (see sbfiles.ScriptError).
const (
	exitNotExist   = 102
	exitIsDir      = 103
	exitNoAccess   = 104
	exitNotDir     = 105
	exitNotRegular = 107
	exitLoop       = 108
	exitNotLink    = 109
)

// fileMain runs the file command cmd (ls, stat, cat, readlink) on args.
func fileMain(cmd string, args []string) int {
	if cmd == "ls" {
		switch {
		case len(args) == 2 && args[0] == "-0":
			return lsMain(args[1], true)
		case len(args) == 1:
			return lsMain(args[0], false)
		}
		usage("sbxd ls [-0] DIR")
	}
	if len(args) != 1 {
		usage("sbxd " + cmd + " PATH")
	}
	switch cmd {
	case "stat":
		return statMain(args[0])
	case "cat":
		return catMain(args[0])
	}
	return readlinkMain(args[0])
}

// putRecord writes one stat record (see sbfiles.StatRecords): framed by
// NUL bytes when nul is set or the name holds a newline, else a line.
func putRecord(w io.Writer, st *syscall.Stat_t, name string, nul bool) {
	nul = nul || containsNewline(name)
	if nul {
		w.Write([]byte{0})
	}
	fmt.Fprintf(w, "%x %d %d %s", st.Mode, st.Size, st.Mtim.Sec, name)
	if nul {
		w.Write([]byte{0})
	} else {
		w.Write([]byte{'\n'})
	}
}

func containsNewline(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return true
		}
	}
	return false
}

func lsMain(dir string, nul bool) int {
	f, err := os.Open(dir)
	if err != nil {
		return fileErrCode(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fileErrCode(err)
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for _, name := range names {
		var st syscall.Stat_t
		if err := syscall.Lstat(dir+"/"+name, &st); err != nil {
			continue // removed while listing
		}
		putRecord(w, &st, name, nul)
	}
	return 0
}

func statMain(name string) int {
	var st syscall.Stat_t
	if err := syscall.Stat(name, &st); err != nil {
		return fileErrCode(&fs.PathError{Op: "stat", Path: name, Err: err})
	}
	putRecord(os.Stdout, &st, name, true)
	return 0
}

func catMain(name string) int {
	f, _, err := hostfs.OpenRegular("read", name)
	if err != nil {
		return fileErrCode(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	w.WriteString("ok\n")
	if _, err := io.Copy(w, f); err != nil {
		w.Flush()
		fmt.Fprintln(os.Stderr, "sbxd cat:", err)
		return 1
	}
	if err := w.Flush(); err != nil {
		return 1
	}
	return 0
}

func readlinkMain(name string) int {
	target, err := os.Readlink(name)
	if err != nil {
		return fileErrCode(err)
	}
	os.Stdout.WriteString(target)
	return 0
}

// fileErrCode is the exit code for a failed file command.
func fileErrCode(err error) int {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return exitNotExist
	case errors.Is(err, os.ErrPermission):
		return exitNoAccess
	case errors.Is(err, syscall.ENOTDIR):
		return exitNotDir
	case errors.Is(err, syscall.EISDIR):
		return exitIsDir
	case errors.Is(err, errdefs.ErrNotRegular):
		return exitNotRegular
	case errors.Is(err, syscall.ELOOP):
		return exitLoop
	case errors.Is(err, syscall.EINVAL):
		return exitNotLink
	}
	fmt.Fprintln(os.Stderr, "sbxd:", err)
	return 1
}
