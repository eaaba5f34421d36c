package server

import (
	"fmt"

	"github.com/sandboxkit/sandboxkit/backend"
)

// FlagAllowUnisolated is the sbx serve flag that allows listening on a
// non-loopback address with a backend that gives no isolation.
const FlagAllowUnisolated = "--allow-unisolated"

// Unisolated reports whether b runs sandboxes without isolation (the local
// backend: host processes).
func Unisolated(b backend.Backend) bool {
	return b.Capabilities().Isolation == backend.IsolationNone
}

// UnisolatedWarning is what sbx serve and sbx mcp print at start on a
// backend without isolation, and "" on any other.
func UnisolatedWarning(b backend.Backend) string {
	if !Unisolated(b) {
		return ""
	}
	return fmt.Sprintf("the %s backend gives no isolation: agents' commands run as host processes with this user's rights "+
		"and can read and change whatever this user can (file tools are confined to each sandbox's folder; commands are not). "+
		`For isolation set [sandbox] backend = "native" (Docker) or "lite" (runc)`, b.Name())
}

// CheckUnisolatedListen refuses to listen on anything but loopback with a
// backend without isolation, whatever the API key, unless allow is set
// (FlagAllowUnisolated): whoever reaches the address could run commands on
// this host.
func CheckUnisolatedListen(addr string, b backend.Backend, allow bool) error {
	host, _, err := splitListen(addr)
	if err != nil {
		return err
	}
	if allow || isLoopback(host) || !Unisolated(b) {
		return nil
	}
	return fmt.Errorf("listen address %q is not loopback and the %s backend gives no isolation: "+
		"whoever can reach the server could run commands on this host as this user. "+
		"Listen on 127.0.0.1, use an isolating backend (native, lite, k8s, ...), or pass %s if that is what you want",
		addr, b.Name(), FlagAllowUnisolated)
}

// isolationNote tells the model, in a tool's description, what the
// sandbox isolates (see describe).
func isolationNote(iso backend.Isolation) string {
	switch iso {
	case backend.IsolationNone:
		return "A sandbox here is a folder on the server's host, without isolation: commands run as host processes " +
			"with the server user's rights and can reach the host's files and network; file tools only reach files inside the sandbox's folder."
	case backend.IsolationVM:
		return "A sandbox is an isolated virtual machine (a kernel, file system and processes of its own)."
	case backend.IsolationGVisor:
		return "A sandbox is an isolated gVisor container (a file system and processes of its own, under a kernel of its own in user space)."
	case backend.IsolationContainer:
		return "A sandbox is an isolated container (a file system and processes of its own, sharing the host's kernel)."
	}
	return ""
}

// isolationMeaning says in a few words what a sandbox's isolation keeps
// apart, for create_sandbox's answer.
func isolationMeaning(iso backend.Isolation) string {
	switch iso {
	case backend.IsolationNone:
		return "host processes, not isolated"
	case backend.IsolationContainer:
		return "a container sharing the host's kernel"
	case backend.IsolationGVisor:
		return "a container under gVisor's own kernel"
	case backend.IsolationVM:
		return "a virtual machine with its own kernel"
	}
	return "unknown"
}

// describe returns tool name's description as agents see it on this
// server's backend: the text of tools(), with what the backend isolates.
func (s *Server) describe(name, description string) string {
	iso := s.opts.Backend.Capabilities().Isolation
	switch name {
	case "create_sandbox":
		if note := isolationNote(iso); note != "" {
			description += " " + note
		}
	case "execute", "terminal_start":
		if iso == backend.IsolationNone {
			description += " NOT isolated: the command runs as a host process and is not confined to the sandbox's folder."
		}
	case "ls", "read_file", "write_file", "edit_file", "glob", "grep":
		if iso == backend.IsolationNone {
			description += " Only paths inside the sandbox's folder are allowed."
		}
	}
	return description
}

// instructions tell the model how the tools fit together.
func (s *Server) instructions() string {
	text := "Sandboxes are places to run commands and edit files in."
	if note := isolationNote(s.opts.Backend.Capabilities().Isolation); note != "" {
		text += " " + note
	}
	return text + `
Start with create_sandbox and pass the sandbox_id it returns to every other tool.
When resuming work, call connect_sandbox with the sandbox_id from earlier in the conversation; if it is gone, create a new one.
A sandbox is removed after a while without tool calls; delete_sandbox it when the work is done.`
}
