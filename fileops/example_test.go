package fileops_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/fileops"
)

// Example gives an agent's tools a local sandbox and shows what the agent
// reads back.
func Example() {
	ctx := context.Background()
	stateDir, err := os.MkdirTemp("", "fileops-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(stateDir)
	b, err := local.New(local.Config{StateDir: stateDir})
	if err != nil {
		log.Fatal(err)
	}
	sb, err := b.Create(ctx, backend.Spec{Name: "example"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)

	tools := fileops.New(sb, fileops.Options{})
	// Relative paths are in the sandbox's working directory.
	out, _ := tools.WriteFile(ctx, "notes/todo.txt", "write tests\nship it\n")
	fmt.Println(out)
	out, _ = tools.EditFile(ctx, "notes/todo.txt", "ship it", "ship it on Friday", false)
	fmt.Println(out)
	out, _ = tools.ReadFile(ctx, "notes/todo.txt", 0, 0)
	fmt.Println(out)
	res, _ := tools.Execute(ctx, "wc -l < notes/todo.txt; exit 3", 0)
	fmt.Println(res)

	// Output:
	// Created file 'notes/todo.txt' (20 bytes).
	// Replaced 1 occurrence in 'notes/todo.txt'.
	//      1	write tests
	//      2	ship it on Friday
	// 2
	// Exit code: 3
}

// An agent-level problem is a *ToolError whose text goes to the agent as it
// is; a program can also test it like any file error.
func ExampleToolError() {
	ctx := context.Background()
	stateDir, err := os.MkdirTemp("", "fileops-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(stateDir)
	b, err := local.New(local.Config{StateDir: stateDir})
	if err != nil {
		log.Fatal(err)
	}
	sb, err := b.Create(ctx, backend.Spec{Name: "example"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Destroy(ctx)
	tools := fileops.New(sb, fileops.Options{})

	_, err = tools.ReadFile(ctx, "missing.txt", 0, 0)
	var te *fileops.ToolError
	if errors.As(err, &te) {
		fmt.Println(te) // for the agent
	}
	fmt.Println(errors.Is(err, fs.ErrNotExist))

	// Output:
	// Error: File not found: 'missing.txt'
	// true
}
