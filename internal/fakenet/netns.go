package fakenet

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps the named namespaces.
const netnsDir = "/run/netns"

// InNamespace runs fn in the network namespace name (under /run/netns),
// as inNamespace: a listener fn opens there stays there.
func InNamespace(name string, fn func() error) error {
	return inNamespace(filepath.Join(netnsDir, name), fn)
}

// inNamespace runs fn on an OS thread that has joined the network namespace
// at path: sockets fn creates, and processes it starts, belong to that
// namespace for good. The thread returns to the process's namespace
// afterwards or, when that fails, dies with its goroutine (it stays locked;
// see runtime.LockOSThread).
func inNamespace(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening network namespace: %w", err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening this thread's network namespace: %w", err)
			return
		}
		defer home.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering network namespace %s: %w", path, err)
			return
		}
		fnErr := sameNamespace(target)
		if fnErr == nil {
			fnErr = fn()
		}
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("leaving network namespace %s: %w", path, err)
			return // the thread stays locked and ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// sameNamespace checks that the calling thread is in the namespace ns: the
// commands fn runs must never configure the host's links by mistake.
func sameNamespace(ns *os.File) error {
	var want, got unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &want); err != nil {
		return fmt.Errorf("stat %s: %w", ns.Name(), err)
	}
	if err := unix.Stat("/proc/thread-self/ns/net", &got); err != nil {
		return fmt.Errorf("stat this thread's network namespace: %w", err)
	}
	if want.Dev != got.Dev || want.Ino != got.Ino {
		return fmt.Errorf("this thread is not in network namespace %s after setns", ns.Name())
	}
	return nil
}

// ip runs `ip -batch -` with one command a line, stopping at the first that
// fails. In inNamespace it configures that namespace: the child inherits the
// thread's namespace, and unlike `ip netns exec` or `ip -n` nothing remounts
// /sys.
func ip(cmds ...string) error {
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip %q: %v: %s", cmds, err, bytes.TrimSpace(out))
	}
	return nil
}

// waitRunning waits until the link name, in the namespace of the calling
// thread, is running (operationally up).
func waitRunning(name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ifi, err := net.InterfaceByName(name)
		if err == nil && ifi.Flags&net.FlagRunning != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("flags %v", ifi.Flags)
			}
			return fmt.Errorf("link %s not running after %v: %v", name, timeout, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// linkExists reports whether the host namespace has a link called name.
func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}
