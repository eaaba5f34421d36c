// Command testbin is the only file in the sandboxkit-test/scratch image, an
// image with no shell and no libc, built by scripts/docker-setup.sh. Tests run
// it inside containers to check that exec, timeouts and file transfer work
// without anything from the image.
//
//	testbin echo ARGS...     print ARGS joined by spaces
//	testbin cat [FILE]       copy FILE (default stdin) to stdout
//	testbin exit N           exit with status N
//	testbin env NAME         print $NAME
//	testbin pwd              print the working directory
//	testbin sleep SECONDS    sleep
//	testbin tree SECONDS     start a child "testbin sleep SECONDS", print its
//	                         pid, then sleep as well (a process tree to kill)
//	testbin serve [PORT]     answer "testbin\n" to every TCP connection on
//	                         PORT (default 8080); the image's CMD
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: testbin echo|cat|exit|env|pwd|sleep|tree|serve ...")
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "echo":
		fmt.Println(strings.Join(args, " "))
	case "cat":
		in := os.Stdin
		if len(args) > 0 {
			f, err := os.Open(args[0])
			if err != nil {
				fail(err.Error())
			}
			in = f
		}
		if _, err := io.Copy(os.Stdout, in); err != nil {
			fail(err.Error())
		}
	case "exit":
		n, _ := strconv.Atoi(arg(args))
		os.Exit(n)
	case "env":
		fmt.Println(os.Getenv(arg(args)))
	case "pwd":
		wd, _ := os.Getwd()
		fmt.Println(wd)
	case "sleep":
		time.Sleep(seconds(arg(args)))
	case "tree":
		cmd := exec.Command("/proc/self/exe", "sleep", arg(args))
		if err := cmd.Start(); err != nil {
			fail(err.Error())
		}
		fmt.Println(cmd.Process.Pid)
		time.Sleep(seconds(arg(args)))
	case "serve":
		port := "8080"
		if len(args) > 0 {
			port = args[0]
		}
		l, err := net.Listen("tcp", ":"+port)
		if err != nil {
			fail(err.Error())
		}
		for {
			c, err := l.Accept()
			if err != nil {
				fail(err.Error())
			}
			io.WriteString(c, "testbin\n")
			c.Close()
		}
	default:
		fail("testbin: unknown command " + os.Args[1])
	}
}

func arg(args []string) string {
	if len(args) == 0 {
		fail("testbin: missing argument")
	}
	return args[0]
}

func seconds(s string) time.Duration {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		fail("testbin: bad seconds " + s)
	}
	return time.Duration(f * float64(time.Second))
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}
