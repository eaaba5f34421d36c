//go:build unix

package server

import "syscall"

// fileLimit returns the file descriptors the process may hold
// (RLIMIT_NOFILE, which Go raises to its hard limit at start), or 0 if
// unknown.
func fileLimit() uint64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return 0
	}
	return rl.Cur // RLIM_INFINITY is the largest value: no cap from it
}
