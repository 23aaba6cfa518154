// Package netlab builds the network of the data-path tests out of Linux
// network namespaces: a "node" namespace, where kube-proxy, CoreDNS and the
// tests' clients run as they would on a cluster node, and one namespace per
// backend host, each joined to the node by a veth link on a bridge and
// holding documentation-range addresses only.
//
// The machine's own network namespace, its routes and its nftables are never
// touched: every `ip` command names a namespace of the lab (ip -n), and
// kube-proxy and CoreDNS run inside the node namespace. Every namespace the
// lab creates is removed by Close, and namespaces left behind by a test
// process that died are removed by the next New.
//
// Sockets are opened inside a namespace from a goroutine locked to an OS
// thread that has joined it (setns). A socket stays in the namespace it was
// opened in, so the returned connections and listeners are used from any
// goroutine. The thread is never returned to the pool: the goroutine exits
// locked, and the Go runtime then ends the thread.
package netlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Namespace is a network namespace of the lab.
type Namespace struct {
	// Name is the namespace's name under /run/netns, for `ip netns exec`.
	Name string
	fd   *os.File
}

// createNamespace adds the named namespace and brings its loopback up.
func createNamespace(name string) (*Namespace, error) {
	if err := ip("netns", "add", name); err != nil {
		return nil, fmt.Errorf("creating network namespace %s (the data-path tests need root and `ip netns`): %w", name, err)
	}
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		return nil, errors.Join(err, ip("netns", "delete", name))
	}
	n := &Namespace{Name: name, fd: f}
	if err := n.IP("link", "set", "lo", "up"); err != nil {
		return nil, errors.Join(err, n.remove())
	}
	return n, nil
}

// IP runs `ip -n <namespace> args...`.
func (n *Namespace) IP(args ...string) error {
	return ip(append([]string{"-n", n.Name}, args...)...)
}

// Do runs fn on an OS thread inside the namespace and waits for it. Sockets
// fn opens belong to the namespace.
func (n *Namespace) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread leaves the pool for good: it exits with this goroutine
		// because it is never unlocked.
		runtime.LockOSThread()
		if err := unix.Setns(int(n.fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("joining network namespace %s: %w", n.Name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Dial connects from inside the namespace.
func (n *Namespace) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen opens a stream listener inside the namespace.
func (n *Namespace) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() (err error) {
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// ListenPacket opens a packet socket inside the namespace.
func (n *Namespace) ListenPacket(network, address string) (net.PacketConn, error) {
	var c net.PacketConn
	err := n.Do(func() (err error) {
		c, err = net.ListenPacket(network, address)
		return err
	})
	return c, err
}

// Command is a command that runs inside the namespace (through `ip netns
// exec`, which enters it and execs the command, so the process is cmd's).
func (n *Namespace) Command(name string, args ...string) *exec.Cmd {
	return n.CommandContext(context.Background(), name, args...)
}

// CommandContext is Command, killed when ctx is done.
func (n *Namespace) CommandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// remove kills what still runs in the namespace and deletes it.
func (n *Namespace) remove() error {
	killAll(n.Name)
	var err error
	if n.fd != nil {
		err = n.fd.Close()
	}
	return errors.Join(err, ip("netns", "delete", n.Name))
}

// killAll kills every process inside the named namespace: a process of a
// test that died would otherwise keep running in a namespace no one owns.
func killAll(name string) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid != os.Getpid() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// ip runs the ip command and returns its output in the error.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
