package chaos_test

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

// replica is one controller: the backendslice binary run as a child
// process, started again on the same ports after each kill. Each run
// appends to one log file, which a failing test prints the end of.
type replica struct {
	t    *testing.T
	name string
	// bin is the controller binary the replica runs: this checkout's,
	// or another release's.
	bin string
	// extra are the flags added to controllerFlags and the bind addresses.
	extra []string
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

// controllerFlags are the flags every child runs with: the test's API
// server, its sources and short refresh intervals, so that changes show
// within seconds.
func controllerFlags() []string {
	return []string{
		"controller",
		"--kubeconfig", env.kubeconfig,
		"--dns-resolvers", env.dns.Addr,
		"--dns-query-timeout", "500ms",
		"--dns-min-refresh", "1s",
		"--dns-max-refresh", dnsMaxRefresh.String(),
		"--consul-address", env.consul.Addr,
		"--consul-wait-time", "30s",
		"--aws-endpoint-url", env.proxy.URL,
		"--aws-refresh-interval", awsRefresh.String(),
		"--aws-max-attempts", "2",
		"--aws-max-backoff", "50ms",
		"--resolve-timeout", "3s",
		"--zap-log-level", "info",
		// The chaos backends name no BackendProvider.
		"--allow-sources-without-provider",
	}
}

// newReplica prepares a controller with extra flags; start runs it. The
// test kills it, whatever state it is in, when it ends.
func newReplica(t *testing.T, name string, extra ...string) *replica {
	t.Helper()
	requireSetUp(t)
	r := &replica{
		t:       t,
		name:    name,
		bin:     env.bin,
		extra:   extra,
		logPath: filepath.Join(t.TempDir(), name+".log"),
	}
	r.pickPorts()
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			t.Logf("controller %s (%d runs, %d kills, %d SIGTERMs), end of its log:\n%s", r.name, r.starts, r.kills, r.terms, r.logTail(6000))
		}
	})
	return r
}

// pickPorts chooses the ports the replica's metrics and health servers
// bind.
func (r *replica) pickPorts() {
	ports := freePorts(r.t, 2)
	r.metricsAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	r.readyAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	r.metricsURL = "http://" + r.metricsAddr + "/metrics"
	r.readyURL = "http://" + r.readyAddr + "/readyz"
}

// startAttempts bounds how often start picks new ports after a child
// found one taken by another process between the pick and its bind.
const startAttempts = 3

// start runs a new controller process and waits until it serves metrics,
// which it does before it has synced its caches or won a lease.
func (r *replica) start() {
	r.t.Helper()
	for attempt := 1; ; attempt++ {
		err := r.startOnce()
		if err == nil {
			return
		}
		if attempt < startAttempts && strings.Contains(err.Error(), "address already in use") {
			r.t.Logf("controller %s: %v; starting again on other ports", r.name, err)
			r.pickPorts()
			continue
		}
		r.t.Fatal(err)
	}
}

// startOnce runs the process once and waits for its metrics; the error
// holds the end of its log when it exited while starting.
func (r *replica) startOnce() error {
	log, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		r.t.Fatal(err)
	}
	defer log.Close()
	r.mu.Lock()
	r.starts++
	fmt.Fprintf(log, "\n===== chaos: run %d of %s at %s =====\n", r.starts, r.name, time.Now().Format(time.RFC3339Nano))
	args := append(controllerFlags(),
		"--metrics-bind-address", r.metricsAddr,
		"--health-probe-bind-address", r.readyAddr)
	cmd := exec.Command(r.bin, append(args, r.extra...)...)
	cmd.Stdout, cmd.Stderr = log, log
	// Static credentials as a Pod's environment gives them; no shared
	// config or instance metadata is looked up.
	cmd.Env = append(os.Environ(),
		"AWS_ACCESS_KEY_ID=AKIDEXAMPLE",
		"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
		"AWS_REGION="+awsRegion,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE="+os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE="+os.DevNull,
	)
	if err := cmd.Start(); err != nil {
		r.mu.Unlock()
		r.t.Fatalf("starting %s: %v", r.bin, err)
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
		if _, err := r.scrape(); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("controller %s exited while starting (%w); end of its log:\n%s", r.name, r.exitErr, r.logTail(4000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller %s serves no metrics 30s after it started", r.name)
		}
	}
}

// kill sends SIGKILL, as the OOM killer or a node failure does, and waits
// for the process to go. It returns when the signal was sent; killing a
// dead replica does nothing.
func (r *replica) kill() time.Time {
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
func (r *replica) alive() (*exec.Cmd, chan struct{}) {
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

// terminate sends SIGTERM, as the kubelet does to a Pod that a rolling
// update or a drain stops, and returns when it was sent; wait tells how
// the process ended. Terminating a dead replica does nothing.
func (r *replica) terminate() time.Time {
	cmd, _ := r.alive()
	if cmd == nil {
		return time.Time{}
	}
	at := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		r.t.Errorf("sending SIGTERM to %s: %v", r.name, err)
	}
	r.mu.Lock()
	r.terms++
	r.mu.Unlock()
	return at
}

// wait waits until the process exits and returns when it did and how; a
// process still running after grace (the Pod's termination grace period)
// is killed, as the kubelet would, and fails the test.
func (r *replica) wait(grace time.Duration) (time.Time, error) {
	r.t.Helper()
	r.mu.Lock()
	exited := r.exited
	r.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(grace):
		r.t.Errorf("controller %s still runs %s after SIGTERM: killed; end of its log:\n%s", r.name, grace, r.logTail(4000))
		r.kill()
	}
	at := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return at, r.exitErr
}

// running tells whether the process is alive, and if not, how it ended.
func (r *replica) running() (bool, error) {
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

// requireRunning fails the test if the controller has exited by itself:
// every fault here must be survived without a restart by the test.
func (r *replica) requireRunning() {
	r.t.Helper()
	if up, err := r.running(); !up {
		r.t.Fatalf("controller %s exited by itself (%v); end of its log:\n%s", r.name, err, r.logTail(4000))
	}
}

// logTail is the end of the replica's log, about n bytes: its last lines,
// each cut short (an error's stack trace says little here).
func (r *replica) logTail(n int) string {
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

// ready tells whether the replica's readiness probe (/readyz, which the
// chart's Deployment probes) passes: a rolling update waits for it before
// it stops an old Pod.
func (r *replica) ready() bool {
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

// metrics are the series one scrape returned.
type metrics []sample

// sum adds the series of metric name whose labels include every pair of match.
func (m metrics) sum(name string, match map[string]string) float64 {
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

// Counters the tests read.
func (m metrics) reconciles() float64 { return m.sum("backendslice_reconciles_total", nil) }
func (m metrics) writes() float64     { return m.sum("backendslice_writes_total", nil) }

// leader tells whether the replica holds the leader election lease, as
// client-go's leader election gauge says.
func (m metrics) leader() bool { return m.sum("leader_election_master_status", nil) == 1 }

// scrape reads the replica's /metrics.
func (r *replica) scrape() (metrics, error) {
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

// mustScrape reads the replica's metrics or fails the test.
func (r *replica) mustScrape() metrics {
	r.t.Helper()
	m, err := r.scrape()
	if err != nil {
		r.t.Fatalf("scraping controller %s: %v", r.name, err)
	}
	return m
}

// parseMetrics reads the Prometheus text format: `name{k="v",...} value`
// lines, comments skipped. The module's direct dependencies have no
// parser of it, and these few lines do not justify one.
func parseMetrics(body io.Reader) (metrics, error) {
	var out metrics
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

// freePorts returns n ports free on 127.0.0.1 now, none returned before
// in this test binary. Another process could take one before the child
// binds it; start then picks again.
func freePorts(t *testing.T, n int) []int {
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

// TestParseMetrics checks the parser the quiet windows rely on: a metric
// it misread would count as zero and hide a write loop.
func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(`# HELP backendslice_writes_total API writes.
# TYPE backendslice_writes_total counter
backendslice_writes_total{kind="EndpointSlice",verb="create"} 3
backendslice_writes_total{kind="Service",verb="update"} 2
backendslice_reconciles_total{result="success"} 41
backendslice_reconciles_total{result="error"} 1
leader_election_master_status{name="backendslice-controller.backendslice.io"} 1
odd_label{v="a \"quoted\", comma"} 7 1700000000000
process_open_fds 12
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		got, want float64
		what      string
	}{
		{m.writes(), 5, "writes"},
		{m.sum("backendslice_writes_total", map[string]string{"kind": "Service"}), 2, "Service writes"},
		{m.reconciles(), 42, "reconciles"},
		{m.sum("odd_label", map[string]string{"v": `a "quoted", comma`}), 7, "escaped label"},
		{m.sum("process_open_fds", nil), 12, "unlabelled"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if !m.leader() {
		t.Error("leader gauge not read")
	}
}
