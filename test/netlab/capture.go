package netlab

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// captureWindow is how far before a failed connection the capture reads
// kube-proxy's log: its minimum sync period (1 s) and then some, so that
// the syncs that programmed the rules the connection met are in it.
const captureWindow = 3 * time.Second

// Capture tells what the node's data path held when a connection failed at
// the time at, so that a failure that does not come back says what
// kube-proxy had programmed: the node namespace's nftables ruleset (`nft
// list ruleset`, read inside the lab's node namespace only), its
// conntrack entries that name one of addrs (all of them when none is
// given; closed ones counted by where they went), and kube-proxy's log
// from captureWindow before at until now (its syncs, and with the lab's
// verbosity the transactions it ran). Each
// part that cannot be read says why instead. Call it at once: the next
// sync may change the rules.
func (l *Lab) Capture(at time.Time, addrs ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- nft list ruleset in %s, %s after the failure\n", l.Node.Name, time.Since(at).Round(time.Millisecond))
	b.WriteString(l.nodeOutput("nft", "list", "ruleset"))
	fmt.Fprintf(&b, "--- conntrack entries in %s naming %s\n", l.Node.Name, orAll(addrs))
	// /proc/net is the reading process's namespace's: cat runs in the
	// node namespace.
	b.WriteString(summarizeClosed(filterLines(l.nodeOutput("cat", "/proc/net/nf_conntrack"), addrs)))
	l.mu.Lock()
	kp := l.kubeProxy
	l.mu.Unlock()
	if kp == nil {
		b.WriteString("--- no kube-proxy runs in the lab\n")
		return b.String()
	}
	fmt.Fprintf(&b, "--- kube-proxy's log from %s (%s)\n", at.Add(-captureWindow).Format("15:04:05.000"), kp.logPath)
	window, err := logWindow(kp.logPath, at.Add(-captureWindow))
	if err != nil {
		window = "(not read: " + err.Error() + ")\n"
	}
	b.WriteString(window)
	return b.String()
}

// nodeOutput runs a command in the node namespace, bounded to 10 s, and
// returns its output, or what failed.
func (l *Lab) nodeOutput(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := l.Node.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(%s failed: %v)\n%s", name, err, out)
	}
	return string(out)
}

// orAll names the addresses a capture filters on.
func orAll(addrs []string) string {
	if len(addrs) == 0 {
		return "any address"
	}
	return strings.Join(addrs, ", ")
}

// filterLines keeps the lines of text that contain one of subs, all of
// them when subs is empty.
func filterLines(text string, subs []string) string {
	if len(subs) == 0 {
		return text
	}
	var b strings.Builder
	for line := range strings.Lines(text) {
		for _, s := range subs {
			if strings.Contains(line, s) {
				b.WriteString(line)
				break
			}
		}
	}
	if b.Len() == 0 {
		return "(none)\n"
	}
	return b.String()
}

// replySource is the source address of an entry's reply direction: where a
// connection was sent (the endpoint, after DNAT).
var replySource = regexp.MustCompile(`\bsrc=\S+ .*?\bsrc=(\S+)`)

// summarizeClosed keeps the conntrack entries of connections still open,
// and counts the closed ones (a client opens hundreds a second, and each
// stays 10 s in CLOSE) by where they were sent.
func summarizeClosed(entries string) string {
	var b strings.Builder
	closed := map[string]int{}
	n := 0
	for line := range strings.Lines(entries) {
		if !strings.Contains(line, " CLOSE ") {
			b.WriteString(line)
			continue
		}
		n++
		if m := replySource.FindStringSubmatch(line); m != nil {
			closed[m[1]]++
		}
	}
	if n > 0 {
		fmt.Fprintf(&b, "and %d closed connections, by where they were sent:", n)
		for _, k := range slices.Sorted(maps.Keys(closed)) {
			fmt.Fprintf(&b, " %s %d", k, closed[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// klogTime reads the time of a klog text line: "I1204 15:02:13.123456 ...".
var klogTime = regexp.MustCompile(`^[IWEF](\d{4}) (\d{2}:\d{2}:\d{2}\.\d{6}) `)

// logWindow is the lines of a klog file from the first one logged at or
// after from to its end; lines without a time of their own (a
// transaction's body) go with the line before them.
func logWindow(path string, from time.Time) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var b strings.Builder
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if m := klogTime.FindStringSubmatch(line); m != nil {
			t, err := time.ParseInLocation("0102 15:04:05.000000", m[1]+" "+m[2], time.Local)
			if err == nil {
				t = t.AddDate(from.Year(), 0, 0)
				in = !t.Before(from.In(time.Local))
			}
		}
		if in {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String(), sc.Err()
}
