package netlab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Process is a program the lab runs in one of its namespaces.
type Process struct {
	name string
	// logPath is the file its output goes to.
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	once    sync.Once
}

// Start runs bin with args inside the node namespace, its output appended
// to logPath. The process is killed when the test binary dies (parent death
// signal) and stopped by Close.
func (l *Lab) Start(logPath, bin string, args ...string) (*Process, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &Process{name: bin, logPath: logPath, cmd: l.Node.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	// The parent death signal is sent when the thread that started the
	// process ends, not the process: start it from a thread kept for as
	// long as the process runs.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer out.Close()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting %s in %s: %w", bin, l.Node.Name, err)
	}
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	l.logf("netlab: %s runs in %s (pid %d), log %s", bin, l.Node.Name, p.cmd.Process.Pid, logPath)
	return p, nil
}

// Exited is closed when the process has ended.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Err is how the process ended, once Exited is closed.
func (p *Process) Err() error { return p.err }

// Stop asks the process to end (SIGTERM), kills it after 5 s, and waits.
func (p *Process) Stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// Forward opens a listener on 127.0.0.1 inside the node namespace that
// passes every connection on to target, an address of the machine's own
// namespace (the test API server on its loopback). It returns the
// listener's address, as seen from the node.
func (l *Lab) Forward(target string) (string, error) {
	ln, err := l.Node.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	var wg sync.WaitGroup
	conns := &connSet{m: map[net.Conn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				forward(c, target, conns)
			}()
		}
	}()
	l.onClose(func() error {
		err := ln.Close()
		conns.closeAll()
		wg.Wait()
		return err
	})
	return ln.Addr().String(), nil
}

// forward copies between c and a new connection to target (dialled from
// this goroutine's thread, in the machine's namespace) until either ends.
func forward(c net.Conn, target string, conns *connSet) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := (&net.Dialer{}).DialContext(ctx, "tcp", target)
	cancel()
	if err != nil {
		_ = c.Close()
		return
	}
	conns.add(c, up)
	defer conns.remove(c, up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// connSet is the forwarder's open connections, closed with the lab.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (s *connSet) add(cs ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		s.m[c] = struct{}{}
	}
}

func (s *connSet) remove(cs ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		delete(s.m, c)
	}
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		_ = c.Close()
	}
}

// Errors of the waits for a process's health endpoint.
var (
	errNotReady = errors.New("not ready")
	errExited   = errors.New("exited")
)
