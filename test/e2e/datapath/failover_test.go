package datapath_test

import (
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
	"github.com/backendslice/backendslice/test/netlab"
)

var (
	flips  = flag.Int("flips", 3, "failovers TestFailover measures for each kind of source (`make bench-failover` runs 100)")
	report = flag.String("report", "", "if set, the Markdown file (docs/benchmarks.md) whose failover section TestFailover rewrites")
)

// The failover's cast: the host that fails, and the two that stay.
const flipper = "c1"

var stayers = []string{"a1", "b1"}

// Bounds of one measurement.
const (
	// settledAfter consecutive connections that all miss the failed host
	// end a measurement: were it still in kube-proxy's rules, each would
	// reach it with probability 1/3, so 40 misses in a row by chance is
	// (2/3)^40, about one in 10^7.
	settledAfter = 40
	// probeGap is the pause between two connections of the client.
	probeGap = 2 * time.Millisecond
	// flipTimeout bounds a failover and a recovery.
	flipTimeout = 15 * time.Second
	// syncGap separates a recovery from the next failure by more than
	// kube-proxy's minSyncPeriod (1 s): a change that follows the last
	// sync sooner waits for the rest of it, which is kube-proxy's rate
	// limit and not the path under test.
	syncGap = 1100 * time.Millisecond
)

// failoverCase is one kind of source: how to publish the three hosts, how
// the flipper fails at the source and how it comes back.
type failoverCase struct {
	name string
	// how says what the failure is, for the report.
	how string
	// reaches are the hosts the Service reaches before the failure (and
	// after the recovery); nil is all three. A failure moves traffic off
	// the flipper either way.
	reaches []string
	backend func(ns string) *v1alpha1.ExternalBackend
	fail    func(t *testing.T, xb *v1alpha1.ExternalBackend)
	restore func(t *testing.T, xb *v1alpha1.ExternalBackend)
}

func failoverCases() []failoverCase {
	all := append([]string{flipper}, stayers...)
	return []failoverCase{
		{
			name: "Consul", how: "the instance's check turns critical (real agent; blocking query)",
			backend: func(ns string) *v1alpha1.ExternalBackend {
				for _, h := range all {
					if err := agent.Register(consultest.Service{ID: ns + "-" + h, Name: ns, Address: hosts[h].Addr4.String()}); err != nil {
						panic(err)
					}
				}
				return sourceBackend(ns, v1alpha1.Source{Name: "consul", Consul: &v1alpha1.ConsulSource{Service: ns}})
			},
			fail: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
				check(t, agent.SetCheck(xb.Namespace+"-"+flipper, "critical"))
			},
			restore: func(t *testing.T, xb *v1alpha1.ExternalBackend) {
				check(t, agent.SetCheck(xb.Namespace+"-"+flipper, "passing"))
			},
		},
		{
			name: "DNS", how: "the A record set drops the address (TTL 1 s, minRefresh 1 s)",
			backend: func(ns string) *v1alpha1.ExternalBackend {
				setA(ns, all...)
				return sourceBackend(ns, v1alpha1.Source{Name: "dns", DNS: &v1alpha1.DNSSource{
					Name: ns + "." + zone, MinRefresh: &metav1.Duration{Duration: time.Second},
				}})
			},
			fail:    func(_ *testing.T, xb *v1alpha1.ExternalBackend) { setA(xb.Namespace, stayers...) },
			restore: func(_ *testing.T, xb *v1alpha1.ExternalBackend) { setA(xb.Namespace, all...) },
		},
		{
			name: "AWS EC2", how: "the instance stops (wire-level fake; listed every " + awsRefresh.String() + ")",
			backend: func(ns string) *v1alpha1.ExternalBackend {
				var ids []string
				for _, h := range all {
					id := instanceID(ns, h)
					ec2.PutEC2Instance(awstest.EC2Instance{ID: id, State: "running", PrivateIP: hosts[h].Addr4.String()})
					ids = append(ids, id)
				}
				return sourceBackend(ns, v1alpha1.Source{Name: "ec2", AWSEC2: &v1alpha1.AWSEC2Source{Region: "eu-west-1", InstanceIDs: ids}})
			},
			fail: func(_ *testing.T, xb *v1alpha1.ExternalBackend) {
				ec2.SetEC2State(instanceID(xb.Namespace, flipper), "stopped")
			},
			restore: func(_ *testing.T, xb *v1alpha1.ExternalBackend) {
				ec2.SetEC2State(instanceID(xb.Namespace, flipper), "running")
			},
		},
		{
			name: "AWS ElastiCache", how: "the primary fails over to a replica: the Service of the group's primary moves (wire-level fake; listed every " + awsRefresh.String() + ")",
			reaches: []string{flipper},
			backend: func(ns string) *v1alpha1.ExternalBackend {
				group := groupID(ns)
				g := awstest.ReplicationGroup{ID: group, Status: "available", Shards: []awstest.Shard{{ID: "0001"}}}
				// The flipper is the primary; the others its replicas.
				for k, h := range all {
					id := memberID(group, h)
					ec2.PutCacheCluster(awstest.CacheCluster{ID: id, Status: "available", Engine: "valkey", ReplicationGroup: group,
						Nodes: []awstest.CacheNode{{ID: "0001", Status: "available", Address: id + ".lab.cache.example",
							Port: echoPort, IPs: []string{hosts[h].Addr4.String()}, Zone: "eu-west-1a"}}})
					g.Shards[0].Members = append(g.Shards[0].Members, awstest.ShardMember{CacheCluster: id, Primary: k == 0})
				}
				ec2.PutReplicationGroup(g)
				return sourceBackend(ns, v1alpha1.Source{Name: "cache", AWSElastiCache: &v1alpha1.AWSElastiCacheSource{
					Region: "eu-west-1", ReplicationGroupID: group, Role: v1alpha1.AWSCacheRolePrimary}})
			},
			fail: func(_ *testing.T, xb *v1alpha1.ExternalBackend) {
				group := groupID(xb.Namespace)
				ec2.FailoverShard(group, "0001", memberID(group, stayers[0]))
			},
			restore: func(_ *testing.T, xb *v1alpha1.ExternalBackend) {
				group := groupID(xb.Namespace)
				ec2.FailoverShard(group, "0001", memberID(group, flipper))
			},
		},
		{
			name: "Static", how: "a spec edit marks the endpoint Unhealthy",
			backend: func(ns string) *v1alpha1.ExternalBackend {
				xb := staticBackend(ns, endpoints(ipv4, flipper, ""), endpoints(ipv4, "a1", ""), endpoints(ipv4, "b1", ""))
				xb.Spec.DrainPeriod = &metav1.Duration{}
				return xb
			},
			fail:    func(t *testing.T, xb *v1alpha1.ExternalBackend) { setHealth(t, xb, v1alpha1.HealthUnhealthy, flipper) },
			restore: func(t *testing.T, xb *v1alpha1.ExternalBackend) { setHealth(t, xb, v1alpha1.HealthHealthy, flipper) },
		},
	}
}

// sourceBackend is an ExternalBackend "svc" in ns with the test's ports,
// IPv4 only, no drain period, and the one source.
func sourceBackend(ns string, src v1alpha1.Source) *v1alpha1.ExternalBackend {
	xb := staticBackend(ns)
	xb.Spec.Sources = []v1alpha1.Source{src}
	xb.Spec.AddressTypes = []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4}
	xb.Spec.DrainPeriod = &metav1.Duration{}
	return xb
}

// setA gives the test's name for ns A records of the hosts named.
func setA(ns string, names ...string) {
	var a []string
	for _, n := range names {
		a = append(a, hosts[n].Addr4.String())
	}
	dnsServer.Set(ns+"."+zone, mdns.TypeA, 1, a...)
}

// instanceID is the EC2 instance of host h for the test in ns: 17 hex
// digits, unique per namespace and host.
func instanceID(ns, h string) string {
	sum := uint64(0)
	for _, c := range ns + "/" + h {
		sum = sum*131 + uint64(c)
	}
	return fmt.Sprintf("i-%017x", sum)
}

// groupID is the replication group of the test in ns: at most 40
// characters, unique per namespace.
func groupID(ns string) string { return "rg-" + strings.TrimPrefix(instanceID(ns, "group"), "i-") }

// memberID is the cache cluster of host h in group.
func memberID(group, h string) string { return group + "-" + h }

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFailover measures, for each kind of source, the time from the
// flipper failing at its source to the first of settledAfter new
// connections in a row from the node that no longer reach it, over -flips
// failovers. Between two failovers the flipper comes back and is reached
// again. No connection may fail meanwhile: the other two hosts serve.
func TestFailover(t *testing.T) {
	var results []failoverResult
	for _, fc := range failoverCases() {
		t.Run(strings.ReplaceAll(fc.name, " ", ""), func(t *testing.T) {
			ns := framework.Namespace(t)
			xb := fc.backend(ns)
			framework.Create(t, xb)
			reaches := fc.reaches
			if reaches == nil {
				reaches = append([]string{flipper}, stayers...)
			}
			framework.WaitStates(t, ns, xb.Name, states(ipv4, ready, reaches...))
			addr := netlab.HostPort(clusterIPs(t, xb)[0], 80)
			history := watchSlices(t, ns)
			r := failoverResult{name: fc.name, how: fc.how}
			for i := range *flips {
				waitReaches(t, "tcp", addr, reaches...)
				time.Sleep(syncGap)
				start := time.Now()
				fc.fail(t, xb)
				took, err := untilMissed(addr, start)
				if err != nil {
					t.Fatalf("failover %d (failed at %s): %v\nthe last slice events:\n%s", i+1, start.Format("15:04:05.000"), err, history)
				}
				r.times = append(r.times, took)
				fc.restore(t, xb)
				if (i+1)%100 == 0 {
					// A long run's progress, should it be stopped.
					t.Logf("%s: %d failovers without a failed connection", fc.name, i+1)
				}
			}
			t.Logf("%s: %s", fc.name, r.summary())
			results = append(results, r)
		})
	}
	if *report != "" && !t.Failed() {
		if err := writeReport(*report, results); err != nil {
			t.Fatal(err)
		}
	}
}

// untilMissed connects to addr from the node, one connection after another,
// until settledAfter in a row miss the flipper, and returns the time from
// start to the first of them. A failed connection is an error: the other
// hosts serve throughout.
func untilMissed(addr string, start time.Time) (time.Duration, error) {
	var firstMiss time.Time
	misses := 0
	for time.Since(start) < flipTimeout {
		at := time.Now()
		name, err := ask("tcp", addr)
		switch {
		case err != nil:
			// What kube-proxy had programmed, read before its next sync.
			ip, _, _ := net.SplitHostPort(addr)
			return 0, fmt.Errorf("a connection %s after the failure failed: %w\nthe node's data path then:\n%s", at.Sub(start), err, lab.Capture(at, ip))
		case name == flipper:
			misses = 0
		default:
			if misses == 0 {
				firstMiss = at
			}
			if misses++; misses == settledAfter {
				return firstMiss.Sub(start), nil
			}
		}
		time.Sleep(probeGap)
	}
	return 0, fmt.Errorf("%s still reached %s after %s", addr, flipper, flipTimeout)
}

// failoverResult is the measured failovers of one kind of source.
type failoverResult struct {
	name, how string
	times     []time.Duration
}

// percentile is the nearest-rank p-th percentile of the times.
func (r failoverResult) percentile(p int) time.Duration {
	s := slices.Sorted(slices.Values(r.times))
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}

func (r failoverResult) summary() string {
	return fmt.Sprintf("%d failovers, p50 %s, p99 %s, max %s", len(r.times),
		ms(r.percentile(50)), ms(r.percentile(99)), ms(r.percentile(100)))
}

// ms writes d in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
