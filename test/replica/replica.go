// Package replica runs the backendslice controller binary as child
// processes, as a Deployment's Pods run it: started, killed (SIGKILL) or
// stopped (SIGTERM) by a test, each with its own metrics and health ports,
// and reads what they say on /metrics and /readyz. test/chaos and
// test/e2e/upgrade run their replicas with it.
package replica

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Replica is one controller: the backendslice binary run as a child
// process, started again on the same ports after each kill. Each run
// appends to one log file, which a failing test prints the end of.
type Replica struct {
	t *testing.T
	// Name names the replica in the test's messages.
	Name string
	// Bin is the controller binary the replica runs: this checkout's,
	// or another release's. It may change between runs.
	Bin string
	// args are the controller's arguments, before the bind addresses.
	args []string
	// metricsURL is the child's /metrics, readyURL its /readyz. Both
	// change when a start finds a port taken and picks new ones.
	metricsURL, readyURL   string
	metricsAddr, readyAddr string
	logPath                string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	// starts counts the processes run, kills the SIGKILLs sent, terms
	// the SIGTERMs.
	starts, kills, terms int
}

// Options say what a replica runs.
type Options struct {
	// Name names the replica in the test's messages and its log file.
	Name string
	// Bin is the controller binary.
	Bin string
	// Args are its arguments ("controller" and flags), without the
	// metrics and health bind addresses, which the replica picks.
	Args []string
}

// AWSRegion is the region in every replica's environment.
const AWSRegion = "eu-west-1"

// New prepares a controller; Start runs it. The test kills it, whatever
// state it is in, when it ends, and prints the end of its log if it
// failed.
func New(t *testing.T, o Options) *Replica {
	t.Helper()
	r := &Replica{
		t:       t,
		Name:    o.Name,
		Bin:     o.Bin,
		args:    o.Args,
		logPath: filepath.Join(t.TempDir(), o.Name+".log"),
	}
	r.pickPorts()
	t.Cleanup(func() {
		r.Kill()
		if t.Failed() {
			t.Logf("controller %s (%d runs, %d kills, %d SIGTERMs), end of its log:\n%s", r.Name, r.starts, r.kills, r.terms, r.LogTail(6000))
		}
	})
	return r
}

// pickPorts chooses the ports the replica's metrics and health servers
// bind.
func (r *Replica) pickPorts() {
	ports := FreePorts(r.t, 2)
	r.metricsAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	r.readyAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	r.metricsURL = "http://" + r.metricsAddr + "/metrics"
	r.readyURL = "http://" + r.readyAddr + "/readyz"
}

// secureMetrics caches, by binary, whether its metrics are secure by
// default (it has --metrics-secure).
var secureMetrics sync.Map

// servesSecureMetrics tells whether the controller binary bin has
// --metrics-secure, from its help.
func servesSecureMetrics(bin string) bool {
	if v, ok := secureMetrics.Load(bin); ok {
		secure, _ := v.(bool)
		return secure
	}
	help, _ := exec.Command(bin, "controller", "--help").CombinedOutput()
	secure := strings.Contains(string(help), "--metrics-secure")
	secureMetrics.Store(bin, secure)
	return secure
}

// startAttempts bounds how often start picks new ports after a child
// found one taken by another process between the pick and its bind.
const startAttempts = 3

// Start runs a new controller process and waits until it serves metrics,
// which it does before it has synced its caches or won a lease.
func (r *Replica) Start() {
	r.t.Helper()
	for attempt := 1; ; attempt++ {
		err := r.startOnce()
		if err == nil {
			return
		}
		if attempt < startAttempts && strings.Contains(err.Error(), "address already in use") {
			r.t.Logf("controller %s: %v; starting again on other ports", r.Name, err)
			r.pickPorts()
			continue
		}
		r.t.Fatal(err)
	}
}

// startOnce runs the process once and waits for its metrics; the error
// holds the end of its log when it exited while starting.
func (r *Replica) startOnce() error {
	log, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	defer log.Close()
	r.mu.Lock()
	r.starts++
	fmt.Fprintf(log, "\n===== chaos: run %d of %s at %s =====\n", r.starts, r.Name, time.Now().Format(time.RFC3339Nano))
	args := append(slices.Clone(r.args),
		"--metrics-bind-address", r.metricsAddr,
		"--health-probe-bind-address", r.readyAddr)
	if servesSecureMetrics(r.Bin) {
		// Plain HTTP on the loopback: the tests read the metrics without
		// a token (test/helm/install checks the secure default). A
		// release before it serves plain HTTP, and knows no such flag.
		args = append(args, "--metrics-secure=false")
	}
	cmd := exec.Command(r.Bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Static credentials as a Pod's environment gives them; no shared
	// config or instance metadata is looked up.
	cmd.Env = append(os.Environ(),
		"AWS_ACCESS_KEY_ID=AKIDEXAMPLE",
		"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
		"AWS_REGION="+AWSRegion,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE="+os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE="+os.DevNull,
	)
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		r.t.Fatalf("starting %s: %v", r.Bin, err)
	}
	exited := make(chan struct{})
	r.cmd, r.exited, r.exitErr = cmd, exited, nil
	r.mu.Unlock()
	go func() {
		err := cmd.Wait()
		r.mu.Lock()
		r.exitErr = err
		r.mu.Unlock()
		close(exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := r.Scrape(); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("controller %s exited while starting (%w); end of its log:\n%s", r.Name, r.exitErr, r.LogTail(4000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller %s serves no metrics 30s after it started", r.Name)
		}
	}
}

// Kill sends SIGKILL, as the OOM killer or a node failure does, and waits
// for the process to go. It returns when the signal was sent; killing a
// dead replica does nothing.
func (r *Replica) Kill() time.Time {
	cmd, exited := r.alive()
	if cmd == nil {
		return time.Time{}
	}
	at := time.Now()
	_ = cmd.Process.Kill()
	<-exited
	r.mu.Lock()
	r.kills++
	r.mu.Unlock()
	return at
}

// alive is the running process and the channel closed when it exits, or
// nil when none runs.
func (r *Replica) alive() (*exec.Cmd, chan struct{}) {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil {
		return nil, nil
	}
	select {
	case <-exited:
		return nil, nil
	default:
		return cmd, exited
	}
}

// Terminate sends SIGTERM, as the kubelet does to a Pod that a rolling
// update or a drain stops, and returns when it was sent; wait tells how
// the process ended. Terminating a dead replica does nothing.
func (r *Replica) Terminate() time.Time {
	cmd, _ := r.alive()
	if cmd == nil {
		return time.Time{}
	}
	at := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		r.t.Errorf("sending SIGTERM to %s: %v", r.Name, err)
	}
	r.mu.Lock()
	r.terms++
	r.mu.Unlock()
	return at
}

// Wait waits until the process exits and returns when it did and how; a
// process still running after grace (the Pod's termination grace period)
// is killed, as the kubelet would, and fails the test.
func (r *Replica) Wait(grace time.Duration) (time.Time, error) {
	r.t.Helper()
	r.mu.Lock()
	exited := r.exited
	r.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(grace):
		r.t.Errorf("controller %s still runs %s after SIGTERM: killed; end of its log:\n%s", r.Name, grace, r.LogTail(4000))
		r.Kill()
	}
	at := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return at, r.exitErr
}

// Running tells whether the process is alive, and if not, how it ended.
func (r *Replica) Running() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false, errors.New("never started")
	}
	select {
	case <-r.exited:
		return false, r.exitErr
	default:
		return true, nil
	}
}

// RequireRunning fails the test if the controller has exited by itself:
// every fault here must be survived without a restart by the test.
func (r *Replica) RequireRunning() {
	r.t.Helper()
	if up, err := r.Running(); !up {
		r.t.Fatalf("controller %s exited by itself (%v); end of its log:\n%s", r.Name, err, r.LogTail(4000))
	}
}

// LogTail is the end of the replica's log, about n bytes: its last lines,
// each cut short (an error's stack trace says little here).
func (r *Replica) LogTail(n int) string {
	b, err := os.ReadFile(r.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var out []string
	for i := len(lines) - 1; i >= 0 && n > 0; i-- {
		l := lines[i]
		if j := strings.Index(l, `,"stacktrace"`); j >= 0 {
			l = l[:j] + "}"
		}
		if len(l) > 400 {
			l = l[:400] + "..."
		}
		out = append(out, l)
		n -= len(l)
	}
	slices.Reverse(out)
	return strings.Join(out, "\n")
}

// Ready tells whether the replica's readiness probe (/readyz, which the
// chart's Deployment probes) passes: a rolling update waits for it before
// it stops an old Pod.
func (r *Replica) Ready() bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(r.readyURL)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// sample is one series of a scraped metric.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// Metrics are the series one scrape returned.
type Metrics []sample

// Sum adds the series of metric name whose labels include every pair of match.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	var total float64
	for _, s := range m {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if s.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			total += s.value
		}
	}
	return total
}

// Reconciles is the controller's count of reconciles.
func (m Metrics) Reconciles() float64 { return m.Sum("backendslice_reconciles_total", nil) }

// Writes is the controller's count of API writes.
func (m Metrics) Writes() float64 { return m.Sum("backendslice_writes_total", nil) }

// Leader tells whether the replica holds the leader election lease, as
// client-go's leader election gauge says.
func (m Metrics) Leader() bool { return m.Sum("leader_election_master_status", nil) == 1 }

// Scrape reads the replica's /metrics.
func (r *Replica) Scrape() (Metrics, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(r.metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", r.metricsURL, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// MustScrape reads the replica's metrics or fails the test.
func (r *Replica) MustScrape() Metrics {
	r.t.Helper()
	m, err := r.Scrape()
	if err != nil {
		r.t.Fatalf("scraping controller %s: %v", r.Name, err)
	}
	return m
}

// parseMetrics reads the Prometheus text format: `name{k="v",...} value`
// lines, comments skipped. The module's direct dependencies have no
// parser of it, and these few lines do not justify one.
func parseMetrics(body io.Reader) (Metrics, error) {
	var out Metrics
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := sample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
			s.name = line[:i]
			end, err := parseLabels(line[i+1:], s.labels)
			if err != nil {
				return nil, fmt.Errorf("metrics line %q: %w", line, err)
			}
			rest = line[i+1+end:]
		} else if i >= 0 {
			s.name, rest = line[:i], line[i:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseLabels reads `k="v",...}` into labels and returns how many bytes
// it took, the closing brace included.
func parseLabels(s string, labels map[string]string) (int, error) {
	i := 0
	for {
		if i < len(s) && s[i] == '}' {
			return i + 1, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 || i+eq+1 >= len(s) || s[i+eq+1] != '"' {
			return 0, errors.New("malformed labels")
		}
		key := strings.TrimSpace(s[i : i+eq])
		j := i + eq + 2
		var val strings.Builder
		for ; j < len(s) && s[j] != '"'; j++ {
			if s[j] == '\\' && j+1 < len(s) {
				j++
				switch s[j] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[j])
				}
				continue
			}
			val.WriteByte(s[j])
		}
		if j >= len(s) {
			return 0, errors.New("unterminated label value")
		}
		labels[key] = val.String()
		i = j + 1
		if i < len(s) && s[i] == ',' {
			i++
		}
	}
}

// handedOut are the ports freePorts returned before. The kernel may hand
// a port out again once its listener closes, before the child that was
// given it binds; two replicas were once given the same one.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePorts returns n ports free on 127.0.0.1 now, none returned before
// in this test binary. Another process could take one before the child
// binds it; start then picks again.
func FreePorts(t *testing.T, n int) []int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		port := int(netip.MustParseAddrPort(l.Addr().String()).Port())
		if handedOut.ports[port] {
			continue
		}
		handedOut.ports[port] = true
		ports = append(ports, port)
	}
	return ports
}
