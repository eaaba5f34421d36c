// Command sbx makes and uses sandboxes from a sandboxkit config: run a
// command in a fresh sandbox (sbx run), keep sandboxes up, exec in them, copy
// files, use the agent tools, and reap what was left behind (sbx gc).
//
// This build links the local, lite, native, remotedocker and opensandbox
// backends and no server, so that it starts fast; sbx serve, sbx mcp and
// configs that use the k8s backend are run by sbx-full (cmd/sbx-full) in
// its place, found next to sbx or on PATH.
package main

import (
	"github.com/sandboxkit/sandboxkit/catalog/core"
	"github.com/sandboxkit/sandboxkit/internal/cli"
)

func main() {
	cli.Main(cli.Features{Backends: core.Backends, Elsewhere: core.Elsewhere})
}
