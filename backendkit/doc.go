// Package backendkit is what a backend for a platform without a daemon of
// its own (host processes, bubblewrap, a runtime driven by its CLI) needs
// besides the contract in package backend, for authors inside this module
// and outside it alike: host commands run by the contract's rules (Exec:
// output limits, stdin, timeouts to 124, tree kill, 126/127; Attach, how
// the sbxd agent starts), and sandbox records in a state folder with crash
// recovery (NewID, WriteRecord, ListRecords, MarkRemoving, ...). The local
// backend is built on it, and examples/bubblewrap, a backend in a module
// of its own, shows how little else a backend needs.
package backendkit
