package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backendslice/backendslice/internal/version"
)

// TestBuildInfo: one series, 1, labelled with the build's version, commit
// and Go version; registering it again (a second manager in the process)
// is not an error and adds no series.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	info := version.Info{Version: "0.2.0", Commit: "e5effa3", GoVersion: "go1.26.8"}
	for range 2 {
		if err := registerBuildInfo(reg, info); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 1 || families[0].GetName() != "backendslice_build_info" || len(families[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one backendslice_build_info series", families)
	}
	m := families[0].GetMetric()[0]
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "0.2.0", "commit": "e5effa3", "goversion": "go1.26.8"}
	if len(got) != len(want) || got["version"] != want["version"] || got["commit"] != want["commit"] || got["goversion"] != want["goversion"] {
		t.Errorf("labels %v, want %v", got, want)
	}
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("value %v, want 1", v)
	}
}
