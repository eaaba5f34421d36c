package config_test

import (
	"github.com/sandboxkit/sandboxkit/catalog"
	"github.com/sandboxkit/sandboxkit/config"
)

// The tests of package config parse configs against the real backends,
// taken from the catalog (the one list); see builtins_test.go.
func init() { config.SetCatalog(catalog.Backends) }
