package publish

// ProbeVerdict is what the probes say of one endpoint.
type ProbeVerdict struct {
	// Probed is false for an endpoint no probe checks.
	Probed bool
	// Passing is the probe's verdict: false takes the endpoint out.
	Passing bool
	// FailOpen lets the endpoint be published as its source says when
	// every probed endpoint of the backend fails.
	FailOpen bool
}

// ProbeOutcome is how the probes changed what is published.
type ProbeOutcome struct {
	// Probed counts the endpoints a probe checks, and Candidates those of
	// them the sources call ready.
	Probed, Candidates int
	// Failing counts those the source calls ready whose probe fails.
	Failing int
	// FailedOpen is true when every probed endpoint the source calls ready
	// fails and each allows fail-open: they are published as the sources
	// say, since sending to all beats sending to none.
	FailedOpen bool
}

// ApplyProbes combines the sources' health with the probes' verdicts
// (verdicts[i] is eps[i]'s). A probe can only take an endpoint out of
// service: one its source calls unhealthy stays so, and one that drains
// stays terminating whatever the probe says. A draining endpoint whose
// probe fails stops serving too: it is not there to answer.
func ApplyProbes(eps []Endpoint, verdicts []ProbeVerdict) ([]Endpoint, ProbeOutcome) {
	var o ProbeOutcome
	openable := true
	for i, e := range eps {
		v := verdicts[i]
		if !v.Probed {
			continue
		}
		o.Probed++
		if !e.Ready() {
			continue
		}
		o.Candidates++
		if !v.Passing {
			o.Failing++
			openable = openable && v.FailOpen
		}
	}
	if o.Candidates > 0 && o.Failing == o.Candidates && openable {
		o.FailedOpen = true
		return eps, o
	}
	out := make([]Endpoint, len(eps))
	for i, e := range eps {
		if v := verdicts[i]; v.Probed && !v.Passing {
			e.Serving = false
		}
		out[i] = e
	}
	return out, o
}
