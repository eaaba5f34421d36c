//go:build !unix

package server

// fileLimit returns 0: the limit is not known here.
func fileLimit() uint64 { return 0 }
