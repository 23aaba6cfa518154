package docsection

import (
	"os"
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
