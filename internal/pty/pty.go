// Package pty opens pseudo-terminals (Linux /dev/ptmx) and sizes them:
// sbxd runs terminals on them, and the terminal tests drive sbx through
// one as a user's terminal would.
package pty

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens a new pseudo-terminal pair: the master (the terminal's
// emulator side) and the terminal a program gets as its stdin, stdout and
// stderr.
func Open() (master, tty *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("opening /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlocking the pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("naming the pseudo-terminal: %w", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	tfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("opening %s: %w", name, err)
	}
	return master, os.NewFile(uintptr(tfd), name), nil
}

// SetSize sets f's terminal size; the foreground process group of the
// terminal gets SIGWINCH. Sizes <= 0 change nothing.
func SetSize(f *os.File, rows, cols int) error {
	if rows <= 0 || cols <= 0 {
		return nil
	}
	return unix.IoctlSetWinsize(int(f.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
}
