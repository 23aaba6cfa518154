package health

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// controller is one controller process, killed when its test ends; a
// failing test prints the end of its log.
type controller struct {
	t    *testing.T
	name string
	// health and metrics are the base URLs of its probe and metrics servers.
	health, metrics string
	cmd             *exec.Cmd
	exited          chan struct{}
	log             string
}

// listenAddrs are two free addresses on 127.0.0.1, for the probes and the
// metrics. Another process could take one meanwhile; the controller then
// fails to start and says so in its log.
func listenAddrs(t *testing.T) (health, metrics string) {
	t.Helper()
	var addrs [2]string
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = l.Addr().String()
		defer l.Close()
	}
	return addrs[0], addrs[1]
}

// startBinary runs `backendslice controller` with the administrator's
// kubeconfig unless args name another, its probes and metrics (plain HTTP:
// test/helm/install checks the secure default) on free ports, and the
// environment of this process plus vars.
func startBinary(t *testing.T, name string, vars []string, args ...string) *controller {
	t.Helper()
	health, metrics := listenAddrs(t)
	all := append([]string{"controller", "--zap-log-level=info",
		"--health-probe-bind-address=" + health, "--metrics-bind-address=" + metrics, "--metrics-secure=false"}, args...)
	if !strings.Contains(strings.Join(args, " "), "--kubeconfig") {
		all = append(all, "--kubeconfig="+env.kubeconfig)
	}
	return start(t, name, exec.Command(env.bin, all...), vars, health, metrics)
}

// startChild runs this test binary as a controller with c (see runChild).
func startChild(t *testing.T, name string, c childConfig) *controller {
	t.Helper()
	c.HealthAddr, c.MetricsAddr = listenAddrs(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return start(t, name, exec.Command(self, "-test.run=^$"), childArgs(t, c), c.HealthAddr, c.MetricsAddr)
}

// start starts cmd, with vars added to this process's environment, and
// waits until its probe server and its metrics server answer: the manager
// starts them one after the other, so the first answering says nothing of
// the second.
func start(t *testing.T, name string, cmd *exec.Cmd, vars []string, health, metrics string) *controller {
	t.Helper()
	c := &controller{t: t, name: name, health: "http://" + health, metrics: "http://" + metrics,
		cmd: cmd, exited: make(chan struct{}), log: filepath.Join(t.TempDir(), name+".log")}
	log, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), vars...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("controller %s, end of its log:\n%s", name, tail(c.log, 4000))
		}
	})
	c.eventually(30*time.Second, "its probe and metrics servers answer", func() error {
		if _, _, err := c.get(c.health + "/healthz"); err != nil {
			return err
		}
		_, _, err := c.get(c.metrics + "/metrics")
		return err
	})
	return c
}

// running fails the test if the process has exited.
func (c *controller) running() {
	c.t.Helper()
	select {
	case <-c.exited:
		c.t.Fatalf("controller %s exited: %v\n%s", c.name, c.cmd.ProcessState, tail(c.log, 4000))
	default:
	}
}

// get is the status and body of an HTTP GET.
func (c *controller) get(url string) (int, string, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// probe is the status and body of a probe path (/readyz, /healthz, or one
// check of either).
func (c *controller) probe(path string) (int, string) {
	c.t.Helper()
	c.running()
	code, body, err := c.get(c.health + path)
	if err != nil {
		c.t.Fatalf("controller %s %s: %v", c.name, path, err)
	}
	return code, body
}

// metric is the first sample of the series whose line starts with prefix
// (a name and labels, as exposed), and whether there is one.
func (c *controller) metric(prefix string) (string, bool) {
	c.t.Helper()
	c.running()
	_, body, err := c.get(c.metrics + "/metrics")
	if err != nil {
		c.t.Fatalf("controller %s metrics: %v", c.name, err)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

// leads tells whether the controller holds the leader election lease.
func (c *controller) leads() bool {
	v, _ := c.metric(`leader_election_master_status{name="backendslice-controller.backendslice.io"}`)
	return v == "1"
}

// eventually retries check every 100 ms until it passes, or fails the test
// after timeout.
func (c *controller) eventually(timeout time.Duration, what string, check func() error) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c.running()
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("controller %s: %s: still not after %s: %v", c.name, what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wantStatus is an error unless path answers code.
func (c *controller) wantStatus(path string, code int) error {
	got, body := c.probe(path)
	if got != code {
		return fmt.Errorf("%s answers %d, want %d: %s", path, got, code, strings.TrimSpace(body))
	}
	return nil
}

// tail is the end of a file, about n bytes.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, len(b)-n):])
}
