// Command sbx-full is sbx with every backend and the server linked in: what
// sbx (cmd/sbx) runs in its place for sbx serve, sbx mcp and configs that
// use the k8s backend. It takes the same commands and can be run itself.
package main

import (
	"github.com/sandboxkit/sandboxkit/catalog"
	"github.com/sandboxkit/sandboxkit/internal/cli"
	"github.com/sandboxkit/sandboxkit/internal/servecmd"
)

func main() {
	cli.Main(cli.Features{Backends: catalog.Backends, Server: servecmd.Server()})
}
