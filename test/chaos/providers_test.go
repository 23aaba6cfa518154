package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/replica"
)

// Faults of TestProvidersDownAcrossRestart, as the report names them.
const (
	faultConsulDown = "Consul agent stopped, controller restarted meanwhile"
	faultDNSDown    = "DNS server stopped, controller restarted meanwhile"
	faultAWS500     = "AWS answering 500, controller restarted meanwhile"
	faultAWSDenied  = "AWS answering AccessDenied, controller restarted meanwhile"
)

// downDrain is the drain period of the backends whose provider goes down:
// the provider stays down for -down, at least twice as long, with a
// controller restart in the first third.
const downDrain = 3 * time.Second

// TestProvidersDownAcrossRestart takes every provider down at once, twice:
// the Consul agent stopped, the DNS server stopped, and AWS answering HTTP
// 500 (first round) or AccessDenied (second round). While they are down the
// controller is killed and started again, and for all of -down (longer
// than the drain period, also after the restart) the endpoints published
// must not change at all: the last known ones stay, none drains. Then the
// providers come back, each changes its answer, and the endpoints must
// follow without another restart.
func TestProvidersDownAcrossRestart(t *testing.T) {
	if *downFor < 2*downDrain {
		t.Fatalf("-down=%s must be at least twice the drain period %s: the provider must stay down past a drain after the restart", *downFor, downDrain)
	}
	ns := namespace(t)
	rng := newRand(t)
	w := env.world
	dnsName, consulSvc, rdsID := "down."+dnsZone, "down-svc", "down-db"
	tags := map[string]string{"chaos": "down"}
	w.setDNS(dnsName, ip4(1, 30), ip4(1, 31), ip6(2, 30))
	w.registerConsul(t, consulSvc, "down-0", ip4(2, 100), api.HealthPassing)
	w.registerConsul(t, consulSvc, "down-1", ip4(2, 101), api.HealthPassing)
	w.registerConsul(t, consulSvc, "down-2", ip4(2, 102), api.HealthCritical)
	w.putEC2(awstest.EC2Instance{ID: "i-down-0", State: "running", PrivateIP: ip4(0, 200), IPv6: ip6(3, 200), Tags: tags})
	w.putEC2(awstest.EC2Instance{ID: "i-down-1", State: "pending", PrivateIP: ip4(0, 201), Tags: tags})
	w.putRDS(awstest.DBInstance{Identifier: rdsID, Status: "available", Address: ip4(1, 210), IPs: []string{ip4(1, 210)}, Port: 5432, NetworkType: "IPV4"})
	cacheID := "down-cache"
	var cacheMembers []awstest.CacheCluster
	for i := range 2 {
		id := fmt.Sprintf("%s-%03d", cacheID, i+1)
		cacheMembers = append(cacheMembers, awstest.CacheCluster{ID: id, Status: "available", Engine: "valkey", ReplicationGroup: cacheID,
			Nodes: []awstest.CacheNode{{ID: "0001", Status: "available", Address: ip4(1, 220+i), IPs: []string{ip4(1, 220+i)}, Port: 6379}}})
	}
	w.putCacheGroup(cacheID, cacheMembers...)
	for _, xb := range []struct {
		name string
		src  v1alpha1.Source
	}{
		{"down-dns", replica.DNSSource("name", dnsName)},
		{"down-consul", replica.ConsulSource("catalog", consulSvc)},
		{"down-ec2", ec2Source("vms", tags)},
		{"down-rds", rdsSource("db", rdsID)},
		{"down-cache", cacheSource("cache", cacheID, v1alpha1.AWSCacheRolePrimary)},
	} {
		w.createBackend(t, replica.Backend(ns, xb.name, downDrain, xb.src))
	}
	r := newReplica(t, "controller")
	start := time.Now()
	r.Start()
	converge(t, "", start, ns)

	denyAll := func(on bool) {
		if !on {
			env.aws.ClearFaults()
			return
		}
		for _, action := range []string{awstest.DescribeDBInstances, awstest.DescribeDBClusters, awstest.DescribeInstances,
			awstest.DescribeReplicationGroups, awstest.DescribeCacheClusters} {
			env.aws.Fail(action, "AccessDenied", -1)
		}
	}
	rounds := []struct {
		awsFault string
		aws      func(down bool)
	}{
		{faultAWS500, env.proxy.setDown},
		{faultAWSDenied, denyAll},
	}
	for n, round := range rounds {
		faultOf := func(k types.NamespacedName) string {
			return map[string]string{
				"down-dns": faultDNSDown, "down-consul": faultConsulDown, "down-ec2": round.awsFault, "down-rds": round.awsFault,
			}[k.Name]
		}
		// Start from rest: nothing draining, so that nothing may change.
		before := settle(t, ns)

		downAt := time.Now()
		if err := env.dns.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := env.consul.Stop(); err != nil {
			t.Fatal(err)
		}
		round.aws(true)
		restored := false
		restore := func() {
			if restored {
				return
			}
			restored = true
			round.aws(false)
			if err := env.dns.Restart(); err != nil {
				t.Errorf("starting the DNS server again: %v", err)
			}
			if err := env.consul.Restart(); err != nil {
				t.Fatalf("starting the Consul agent again: %v", err)
			}
		}
		// Never leave a provider down for the next test, even on failure.
		t.Cleanup(restore)

		killAt := downAt.Add(time.Second + time.Duration(rng.Int64N(int64(*downFor/3))))
		killed := false
		changes := changeLog{}
		for time.Now().Before(downAt.Add(*downFor)) {
			if !killed && time.Now().After(killAt) {
				at := r.Kill()
				w.down(at)
				r.Start()
				w.up(time.Now())
				killed = true
				t.Logf("round %d: controller killed %s after the providers went down, running again after %s",
					n+1, at.Sub(downAt).Round(time.Millisecond), time.Since(at).Round(time.Millisecond))
			}
			v, err := w.check(context.Background(), ns)
			if err != nil {
				t.Fatal(err)
			}
			changes.add(before, v, time.Since(downAt))
			time.Sleep(250 * time.Millisecond)
		}
		r.RequireRunning()
		for _, f := range []string{faultDNSDown, faultConsulDown, round.awsFault} {
			var mine []violation
			for _, c := range changes {
				if faultOf(c.backend) == f {
					mine = append(mine, c)
				}
			}
			env.ledger.broken(f, mine)
		}
		if len(changes) > 0 {
			t.Errorf("round %d: what was published changed while the providers were down for %s (seed %d):%s", n+1, *downFor, env.seed, changes.verdict())
		}

		// Back: the catalog of a dev agent starts empty, so register its
		// instances again, then change every provider's answer.
		restore()
		upAt := time.Now()
		w.reregisterConsul(t)
		w.setDNS(dnsName, ip4(1, 30), ip4(1, 32+n), ip6(2, 31+n))
		w.registerConsul(t, consulSvc, fmt.Sprintf("down-n%d", n), ip4(2, 110+n), api.HealthPassing)
		w.setConsulCheck(t, consulSvc, "down-2", api.HealthPassing)
		w.deregisterConsul(t, consulSvc, "down-1")
		w.registerConsul(t, consulSvc, "down-1", ip4(2, 101), api.HealthPassing)
		w.setEC2State("i-down-1", "running")
		w.putEC2(awstest.EC2Instance{ID: fmt.Sprintf("i-down-n%d", n), State: "running", PrivateIP: ip4(0, 210+n), Tags: tags})
		w.setRDSStatus(rdsID, map[bool]string{true: "rebooting", false: "available"}[n%2 == 0])
		w.failoverCache(cacheID, cacheMembers[(n+1)%len(cacheMembers)].ID)
		r.RequireRunning()
		convergeEach(t, at(upAt), faultOf, ns)
		// The next round starts from the same instances.
		w.setEC2State("i-down-1", "pending")
		w.setConsulCheck(t, consulSvc, "down-2", api.HealthCritical)
	}
}

// settle waits until the namespace holds its invariants with nothing
// draining, and returns what is published then.
func settle(t *testing.T, ns string) verdict {
	t.Helper()
	deadline := time.Now().Add(convergeTimeout)
	for {
		v := converge(t, "", time.Now(), ns)
		draining := false
		for _, eps := range v.published {
			for _, e := range eps {
				draining = draining || e.terminating
			}
		}
		if !draining {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("endpoints still draining after %s", convergeTimeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// changeLog holds each change seen in what is published while a provider
// is down, once, with when it was first seen.
type changeLog map[string]violation

// add records how now differs from before, an endpoint at a time, seen
// `after` into the outage.
func (l changeLog) add(before, now verdict, after time.Duration) {
	at := after.Round(time.Millisecond)
	note := func(k types.NamespacedName, cat category, id, msg string) {
		if _, seen := l[id]; !seen {
			l[id] = violation{cat: cat, backend: k, msg: msg}
		}
	}
	for k, was := range before.published {
		is := now.published[k]
		for a, e := range was {
			got, ok := is[a]
			switch {
			case !ok:
				note(k, lost, fmt.Sprintf("%s %s gone", k, a), fmt.Sprintf("backend %s: %s (%s) was unpublished %s into the outage", k, a, e, at))
			case !sameConditions(got, e):
				note(k, wrong, fmt.Sprintf("%s %s %s", k, a, got), fmt.Sprintf("backend %s: %s changed from %s to %s %s into the outage", k, a, e, got, at))
			}
		}
		for a, e := range is {
			if _, ok := was[a]; !ok {
				note(k, stale, fmt.Sprintf("%s %s new", k, a), fmt.Sprintf("backend %s: %s (%s) was published %s into the outage, though no source could report it", k, a, e, at))
			}
		}
	}
}

// verdict lists the changes, sorted.
func (l changeLog) verdict() verdict {
	var v verdict
	for _, id := range slices.Sorted(maps.Keys(l)) {
		v.violations = append(v.violations, l[id])
	}
	return v
}

// sameConditions compares the conditions of two publications of an
// endpoint (which slice holds it may change).
func sameConditions(a, b epState) bool {
	return a.ready == b.ready && a.serving == b.serving && a.terminating == b.terminating
}
