//go:build !(linux && amd64)

package spawn

import "os/exec"

func start(cmd *exec.Cmd) error { return cmd.Start() }

func available() bool { return false }
