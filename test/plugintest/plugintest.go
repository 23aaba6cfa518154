// Package plugintest runs the example plugins (examples/plugins) as
// processes of their own, for the tests that reach them over real HTTP
// and HTTPS: the hostsfile plugin (Go, on the SDK), built once into a
// directory, and the inventory plugin (Python, stdlib only); and the
// verbatim plugin, which answers what its file says, broken or not.
package plugintest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// startBound bounds how long a plugin may take to say where it listens.
const startBound = 30 * time.Second

// Root is the repository's root (the main module's directory).
func Root() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the backendslice module")
	}
	return filepath.Dir(mod), nil
}

// Example is the path of a file of an example plugin, such as
// Example("hostsfile", "testdata", "hosts.yaml").
func Example(parts ...string) string {
	root, err := Root()
	if err != nil {
		panic(err)
	}
	return filepath.Join(append([]string{root, "examples", "plugins"}, parts...)...)
}

// BuildHostsfile builds the hostsfile plugin into dir and returns its path.
func BuildHostsfile(dir string) (string, error) {
	return build(dir, "hostsfile", "./examples/plugins/hostsfile")
}

// BuildVerbatim builds the verbatim plugin (test/plugintest/verbatim),
// which answers exactly what its file says, into dir and returns its path.
func BuildVerbatim(dir string) (string, error) {
	return build(dir, "verbatim", "./test/plugintest/verbatim")
}

// build builds the command of package pkg (a path from the repository's
// root) into dir as name, and returns its path.
func build(dir, name, pkg string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the %s plugin: %w\n%s", name, err, out)
	}
	return bin, nil
}

// Python is the command line that runs the Python inventory plugin.
func Python(args ...string) []string {
	return append([]string{"python3", Example("inventory-python", "inventory.py")}, args...)
}

// Process is a plugin running as a process of its own.
type Process struct {
	// Addr is where it listens, host:port; URL is scheme://Addr.
	Addr, URL string
	cmd       *exec.Cmd
	exited    chan struct{}
}

// Start runs argv, a plugin that prints "listening on HOST:PORT" first,
// and returns once it has; scheme (http or https) makes its URL. The
// process dies with the test process, and its other output goes to stderr.
func Start(scheme string, argv ...string) (*Process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		addr <- strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
		_, _ = io.Copy(os.Stderr, r)
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	select {
	case a := <-addr:
		if a == "" {
			p.Kill()
			return nil, fmt.Errorf("%s: said nothing of where it listens", argv[0])
		}
		p.Addr, p.URL = a, scheme+"://"+a
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before it listened", argv[0])
	case <-time.After(startBound):
		p.Kill()
		return nil, fmt.Errorf("%s did not listen within %s", argv[0], startBound)
	}
}

// Port is the port the process listens on.
func (p *Process) Port() string { return p.Addr[strings.LastIndex(p.Addr, ":")+1:] }

// Kill stops the process at once, as a crash would, and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// PID is the process's id.
func (p *Process) PID() int { return p.cmd.Process.Pid }
