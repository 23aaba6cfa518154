package publish

import (
	"testing"
)

func TestApplyProbes(t *testing.T) {
	ready := Endpoint{Address: "192.0.2.1", Serving: true}
	unhealthy := Endpoint{Address: "192.0.2.2"}
	draining := Endpoint{Address: "192.0.2.3", Serving: true, Terminating: true}
	pass := ProbeVerdict{Probed: true, Passing: true, FailOpen: true}
	fail := ProbeVerdict{Probed: true, FailOpen: true}
	failClosed := ProbeVerdict{Probed: true}
	none := ProbeVerdict{}
	// state is ready/serving/terminating of each endpoint out.
	state := func(e Endpoint) string {
		s := ""
		for _, b := range []bool{e.Ready(), e.Serving, e.Terminating} {
			if b {
				s += "1"
			} else {
				s += "0"
			}
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		eps      []Endpoint
		verdicts []ProbeVerdict
		want     []string
		outcome  ProbeOutcome
	}{
		{"no probes", []Endpoint{ready, unhealthy}, []ProbeVerdict{none, none}, []string{"110", "000"}, ProbeOutcome{}},
		{"a failing probe takes a ready endpoint out", []Endpoint{ready, ready}, []ProbeVerdict{pass, fail},
			[]string{"110", "000"}, ProbeOutcome{Probed: 2, Candidates: 2, Failing: 1}},
		{"a passing probe never makes an unhealthy endpoint ready", []Endpoint{unhealthy, ready}, []ProbeVerdict{pass, pass},
			[]string{"000", "110"}, ProbeOutcome{Probed: 2, Candidates: 1}},
		{"a draining endpoint stays terminating when its probe passes", []Endpoint{draining, ready}, []ProbeVerdict{pass, pass},
			[]string{"011", "110"}, ProbeOutcome{Probed: 2, Candidates: 1}},
		{"a draining endpoint whose probe fails stops serving", []Endpoint{draining, ready}, []ProbeVerdict{fail, pass},
			[]string{"001", "110"}, ProbeOutcome{Probed: 2, Candidates: 1}},
		{"every ready endpoint failing fails open", []Endpoint{ready, ready, unhealthy}, []ProbeVerdict{fail, fail, fail},
			[]string{"110", "110", "000"}, ProbeOutcome{Probed: 3, Candidates: 2, Failing: 2, FailedOpen: true}},
		{"fail-open off: every failing endpoint goes out", []Endpoint{ready, ready}, []ProbeVerdict{failClosed, failClosed},
			[]string{"000", "000"}, ProbeOutcome{Probed: 2, Candidates: 2, Failing: 2}},
		{"one failing endpoint without fail-open keeps all closed", []Endpoint{ready, ready}, []ProbeVerdict{fail, failClosed},
			[]string{"000", "000"}, ProbeOutcome{Probed: 2, Candidates: 2, Failing: 2}},
		{"an unprobed ready endpoint does not stop fail-open", []Endpoint{ready, ready}, []ProbeVerdict{fail, none},
			[]string{"110", "110"}, ProbeOutcome{Probed: 1, Candidates: 1, Failing: 1, FailedOpen: true}},
		{"nothing ready to probe: no fail-open", []Endpoint{unhealthy}, []ProbeVerdict{fail},
			[]string{"000"}, ProbeOutcome{Probed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, o := ApplyProbes(tc.eps, tc.verdicts)
			var got []string
			for _, e := range out {
				got = append(got, state(e))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("endpoint %d: %s, want %s (all %v)", i, got[i], tc.want[i], got)
				}
			}
			if o != tc.outcome {
				t.Errorf("outcome %+v, want %+v", o, tc.outcome)
			}
			for _, e := range tc.eps {
				if e.Address == ready.Address && !e.Serving {
					t.Error("the input was changed in place")
				}
			}
		})
	}
}
