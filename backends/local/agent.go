package local

import "path/filepath"

// AgentHome is the folder for an sbxd agent of this sandbox (its binary and
// its background jobs' output): inside the sandbox's state folder, next to
// (not inside) its working folder, so it goes with the sandbox and is not
// shared with other sandboxes or users through /tmp (sbxd.AgentHomer).
func (s *Sandbox) AgentHome() string { return filepath.Join(s.dir, "agent") }
