package initializers

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// GenericFactory is the generic initializer: a plain sandbox made from its
// entry's keys, with nothing to provision, probe or publish.
func GenericFactory() Factory {
	return Factory{
		NewConfig: func() any { return new(GenericConfig) },
		New:       func(any) (Initializer, error) { return Generic{}, nil },
	}
}

// GenericConfig is the generic initializer's config: Common's keys, type
// checked; other keys in its [extra] table are left alone, as every
// initializer's are (OpenSage entries carry settings for their own tools
// there).
type GenericConfig struct {
	Common
}

// OpenExtra makes GenericConfig an OpenConfig.
func (*GenericConfig) OpenExtra() {}

// OpenConfig was implemented by initializer configs whose [extra] table may
// hold keys they do not know. Every config is open now (OpenSage's [extra]
// is a free map; the session warns about keys nothing reads), so it changes
// nothing; it is kept so that configs implementing it still compile.
type OpenConfig interface{ OpenExtra() }

// Generic is an initializer that adds nothing to its entry. Embed it in an
// initializer that only needs some of the methods.
type Generic struct{}

func (Generic) Spec() backend.Spec                         { return backend.Spec{} }
func (Generic) DependsOn() []Dependency                    { return nil }
func (Generic) Provision(context.Context, *Instance) error { return nil }
func (Generic) Ready() wait.Strategy                       { return nil }
func (Generic) Publish(string) map[string]string           { return nil }
