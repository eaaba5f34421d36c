// Package initest is an initializer in a package of its own, for tests:
// it registers type "initest" with initializers.Register from its init
// function, as an initializer outside the initializers package would, so
// that a program that imports it (the sbx tests do) knows the type in
// config check, up and serve. Its sandbox gets the [extra] key greeting
// written to /tmp/initest by Provision, and publishes INITEST_GREETING.
package initest

import (
	"context"
	"errors"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers"
)

// Type is the initializer's type name.
const Type = "initest"

// Config is its [extra] keys.
type Config struct {
	initializers.Common
	Greeting string `toml:"greeting"`
}

func init() {
	initializers.Register(Type, initializers.Factory{
		NewConfig: func() any { return &Config{Greeting: "hello"} },
		New: func(cfg any) (initializers.Initializer, error) {
			c := cfg.(*Config)
			if strings.TrimSpace(c.Greeting) == "" {
				return nil, errors.New("greeting: empty")
			}
			return &initializer{greeting: c.Greeting}, nil
		},
	})
}

type initializer struct {
	initializers.Generic
	greeting string
}

func (i *initializer) Provision(ctx context.Context, in *initializers.Instance) error {
	res, err := in.Sandbox.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", `printf %s "$1" > initest.txt`, "sh", i.greeting}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return errors.New("writing initest.txt: " + string(res.Stderr))
	}
	return nil
}

func (i *initializer) Publish(string) map[string]string {
	return map[string]string{"INITEST_GREETING": i.greeting}
}
