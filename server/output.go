package server

import "strings"

// inOrder returns command so that its stderr goes to the same pipe as its
// stdout ("exec 2>&1" on the same line, so line numbers in error messages
// do not move). The backends carry the two streams apart, and the agent's
// text, which holds both, showed them out of the order the command wrote
// them in most runs; from one pipe they arrive as written. Redirections in
// the command still apply. A blank command is left alone, for the tools to
// refuse.
func inOrder(command string) string {
	if strings.TrimSpace(command) == "" {
		return command
	}
	return "exec 2>&1; " + command
}
