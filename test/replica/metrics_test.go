package replica

import (
	"strings"
	"testing"
)

// TestParseMetrics checks the parser the tests' counts rely on: a metric
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
		{m.Writes(), 5, "writes"},
		{m.Sum("backendslice_writes_total", map[string]string{"kind": "Service"}), 2, "Service writes"},
		{m.Reconciles(), 42, "reconciles"},
		{m.Sum("odd_label", map[string]string{"v": `a "quoted", comma`}), 7, "escaped label"},
		{m.Sum("process_open_fds", nil), 12, "unlabelled"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if !m.Leader() {
		t.Error("leader gauge not read")
	}
}
