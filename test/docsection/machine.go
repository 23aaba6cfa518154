package docsection

import (
	"os"
	"strconv"
	"strings"
)

// LoadAverage is the machine's load average over 1, 5 and 15 minutes, as
// /proc/loadavg gives it ("unknown" where it cannot be read): the reports
// say what else ran beside a measurement on a shared machine.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// RSS is this process's resident set (VmRSS) in bytes, 0 where it cannot
// be read: the memory benchmarks report it beside the Go heap, since it is
// what a container's memory limit counts.
func RSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kib << 10
		}
	}
	return 0
}
