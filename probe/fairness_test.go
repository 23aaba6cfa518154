package probe

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// floodDialer blackholes the addresses in blackholed (a connect that
// never answers: it returns only when the probe's context ends) and
// answers every other address at once, counting the dials per address.
type floodDialer struct {
	blackholed map[string]bool

	mu    sync.Mutex
	dials map[string]int
}

func (d *floodDialer) dial(ctx context.Context, _, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if d.blackholed[host] {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	d.mu.Lock()
	d.dials[host]++
	d.mu.Unlock()
	c, peer := net.Pipe()
	_ = peer.Close()
	return c, nil
}

func (d *floodDialer) count(host string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials[host]
}

// TestProbesFairAcrossNamespaces floods the prober from one namespace
// with 1,600 blackholed targets at a 200 ms period, each holding its slot
// until its timeout: far more than the pool. A target of another
// namespace must still be probed at its period, and so must a target the
// flooding namespace asked for first and the other namespace shares.
func TestProbesFairAcrossNamespaces(t *testing.T) {
	const (
		period  = 200 * time.Millisecond
		floods  = 1600
		victim  = "192.0.2.1"
		shared  = "192.0.2.2"
		measure = 2 * time.Second
	)
	check := Check{Kind: TCP, Port: 5432, Period: period, Timeout: 150 * time.Millisecond,
		SuccessThreshold: 1, FailureThreshold: 3, InitialReady: true}
	d := &floodDialer{blackholed: map[string]bool{}, dials: map[string]int{}}
	var flood []Target
	for i := range floods {
		a := fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
		d.blackholed[a] = true
		flood = append(flood, Target{Address: a, Check: check})
	}
	p := New(Options{Dial: d.dial})
	start(t, p)

	attacker := types.NamespacedName{Namespace: "mallory", Name: "flood"}
	p.Sync(attacker, append(flood, Target{Address: shared, Check: check}))
	// Let the flood fill the pool before the victim asks.
	time.Sleep(time.Second)
	p.Sync(types.NamespacedName{Namespace: "alice", Name: "db"},
		[]Target{{Address: victim, Check: check}, {Address: shared, Check: check}})

	// The first probe comes within a period (jitter); allow for a slow
	// machine, then count over a fixed window.
	if !waitFor(5*time.Second, func() bool { return d.count(victim) > 0 && d.count(shared) > 0 }) {
		t.Fatalf("no probe of the victim's targets in 5s under the flood: victim %d, shared %d", d.count(victim), d.count(shared))
	}
	v0, s0 := d.count(victim), d.count(shared)
	time.Sleep(measure)
	v, s := d.count(victim)-v0, d.count(shared)-s0
	want := int(measure / period)
	t.Logf("in %v at a period of %v under a flood of %d blackholed targets: victim %d probes, shared %d (expected %d each)",
		measure, period, floods, v, s, want)
	if least := want * 8 / 10; v < least || s < least {
		t.Errorf("victim %d probes, shared %d in %v; want at least %d of %d each: one namespace's targets must not starve another's",
			v, s, measure, least, want)
	}
	if most := want + 2; v > most || s > most {
		t.Errorf("victim %d probes, shared %d in %v; want at most %d each (a period apart)", v, s, measure, most)
	}
}
