package chaos_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/replica"
)

// churner keeps the sources of a set of backends changing, one random step
// at a time, through every kind of change the issue names: spec edits
// (endpoints added and removed, health flipped, a Service renamed, the
// slice size changed), DNS answers changing, Consul checks flipping and
// instances registered and deregistered, EC2 instances started, stopped
// and terminated, an RDS instance rebooting.
type churner struct {
	t   *testing.T
	rng *rand.Rand
	ns  string
	// prefix names this churner's DNS names, Consul services and EC2 tags,
	// so that two churners (two tests) never share a source.
	prefix string
	ops    []op
	// last is when the last step was made.
	last  time.Time
	steps map[string]int
	next  int // a counter for new instance names
}

// op is one kind of change; weight is how often it is drawn.
type op struct {
	name   string
	weight int
	do     func()
}

// newChurner creates, in ns, one backend of every kind of source and the
// sources behind them, and the steps that change them:
//
//	<p>-static    static, both families, drain 2s, Service renamed back and forth
//	<p>-nodrain   static, drain 0s (vanished endpoints go at once)
//	<p>-dns       a DNS name's A and AAAA records, drain 3s
//	<p>-consul    a Consul service's instances and checks, drain 2s
//	<p>-mixed     static + DNS + Consul at once, overlapping addresses
//	<p>-ec2       EC2 instances by tag, drain 2s
//	<p>-rds       one RDS instance, drain 2s
//	<p>-big       250 static endpoints over slices of 100 (or 60), drain 1s
//
// Every backend keeps one address its sources always report (an anchor),
// which lookalike slices can duplicate.
func newChurner(t *testing.T, rng *rand.Rand, ns, p string) *churner {
	t.Helper()
	c := &churner{t: t, rng: rng, ns: ns, prefix: p, steps: map[string]int{}}
	w := env.world
	key := func(name string) types.NamespacedName {
		return types.NamespacedName{Namespace: ns, Name: p + "-" + name}
	}
	dnsA, dnsMixed := p+"-a."+dnsZone, p+"-mixed."+dnsZone
	consulA, consulMixed := p+"-web", p+"-mixed"
	ec2Tags := map[string]string{"chaos": p}

	// Sources first, so that the first pass already finds them.
	w.setDNS(dnsA, ip4(1, 0), ip4(1, 1), ip6(2, 0))
	w.setDNS(dnsMixed, ip4(1, 10), ip4(1, 11))
	for i := range 3 {
		w.registerConsul(t, consulA, fmt.Sprintf("%s-%d", consulA, i), ip4(2, i), api.HealthPassing)
	}
	w.registerConsul(t, consulMixed, consulMixed+"-0", ip4(2, 20), api.HealthPassing)
	for i := range 3 {
		w.putEC2(awstest.EC2Instance{ID: fmt.Sprintf("i-%s-%d", p, i), State: "running", PrivateIP: ip4(0, 100+i), IPv6: ip6(3, i), Zone: awsRegion + "a", Tags: ec2Tags})
	}
	rdsID := p + "-db"
	w.putRDS(awstest.DBInstance{Identifier: rdsID, Status: "available", Address: ip4(1, 200), IPs: []string{ip4(1, 200)}, Port: 5432, Zone: awsRegion + "b", NetworkType: "IPV4"})
	cacheID := p + "-cache"
	var cacheMembers []awstest.CacheCluster
	for i := range 3 {
		id := fmt.Sprintf("%s-%03d", cacheID, i+1)
		cacheMembers = append(cacheMembers, awstest.CacheCluster{ID: id, Status: "available", Engine: "valkey", ReplicationGroup: cacheID,
			Nodes: []awstest.CacheNode{{ID: "0001", Status: "available", Address: ip4(1, 210+i), IPs: []string{ip4(1, 210+i)}, Port: 6379, Zone: awsRegion + "a"}}})
	}
	w.putCacheGroup(cacheID, cacheMembers...)

	staticAddrs := []string{ip4(0, 0), ip4(0, 1), ip4(0, 2), ip6(1, 0), ip6(1, 1)}
	var bigAddrs []string
	for i := range 250 {
		bigAddrs = append(bigAddrs, ip4(i%3, i/3))
	}
	big := replica.Backend(ns, p+"-big", time.Second, replica.StaticSource("many", bigAddrs...))
	big.Spec.MaxEndpointsPerSlice = ptr.To[int32](100)
	for _, xb := range []*v1alpha1.ExternalBackend{
		replica.Backend(ns, p+"-static", 2*time.Second, replica.StaticSource("vms", staticAddrs...)),
		replica.Backend(ns, p+"-nodrain", 0, replica.StaticSource("vms", ip4(0, 10), ip4(0, 11), ip6(1, 10))),
		replica.Backend(ns, p+"-dns", 3*time.Second, replica.DNSSource("name", dnsA)),
		replica.Backend(ns, p+"-consul", 2*time.Second, replica.ConsulSource("catalog", consulA)),
		replica.Backend(ns, p+"-mixed", 2*time.Second,
			replica.StaticSource("pinned", ip4(1, 10)), replica.DNSSource("name", dnsMixed), replica.ConsulSource("catalog", consulMixed)),
		replica.Backend(ns, p+"-ec2", 2*time.Second, ec2Source("vms", ec2Tags)),
		replica.Backend(ns, p+"-rds", 2*time.Second, rdsSource("db", rdsID)),
		replica.Backend(ns, p+"-cache-writer", 0, cacheSource("cache", cacheID, v1alpha1.AWSCacheRolePrimary)),
		replica.Backend(ns, p+"-cache-readers", 2*time.Second, cacheSource("cache", cacheID, v1alpha1.AWSCacheRoleReaders)),
		big,
	} {
		w.createBackend(t, xb)
	}

	// editStatic changes the static source of backend name: add, remove
	// (never the anchor, the first address) or flip the health of one.
	editStatic := func(name string, pool func(i int) string) func() {
		return func() {
			w.editBackend(t, key(name), func(xb *v1alpha1.ExternalBackend) {
				eps := &xb.Spec.Sources[0].Static.Endpoints
				switch n := len(*eps); c.rng.IntN(3) {
				case 0:
					a := pool(c.rng.IntN(40))
					if !slices.ContainsFunc(*eps, func(e v1alpha1.StaticEndpoint) bool { return e.Address == a }) {
						*eps = append(*eps, v1alpha1.StaticEndpoint{Address: a})
					}
				case 1:
					if n > 1 {
						i := 1 + c.rng.IntN(n-1)
						*eps = slices.Delete(*eps, i, i+1)
					}
				default:
					if n > 1 {
						e := &(*eps)[1+c.rng.IntN(n-1)]
						e.Health = map[bool]v1alpha1.Health{true: v1alpha1.HealthUnhealthy, false: v1alpha1.HealthHealthy}[e.Health != v1alpha1.HealthUnhealthy]
					}
				}
			})
		}
	}
	either := func(i int, a, b func(int) string) string {
		if c.rng.IntN(2) == 0 {
			return a(i)
		}
		return b(i)
	}
	v4 := func(b int) func(int) string { return func(i int) string { return ip4(b, i) } }
	v6 := func(n int) func(int) string { return func(i int) string { return ip6(n, i) } }
	c.ops = []op{
		{"static endpoints edited", 4, editStatic("static", func(i int) string { return either(i, v4(0), v6(1)) })},
		{"static endpoints edited (no drain)", 2, editStatic("nodrain", func(i int) string { return either(10+i, v4(0), v6(1)) })},
		{"Service renamed", 1, func() {
			w.editBackend(t, key("static"), func(xb *v1alpha1.ExternalBackend) {
				if xb.Spec.Service.Name == "" {
					xb.Spec.Service.Name = p + "-static-renamed"
				} else {
					xb.Spec.Service.Name = ""
				}
			})
		}},
		{"slice size changed", 1, func() {
			w.editBackend(t, key("big"), func(xb *v1alpha1.ExternalBackend) {
				xb.Spec.MaxEndpointsPerSlice = ptr.To(map[bool]int32{true: 60, false: 100}[ptr.Deref(xb.Spec.MaxEndpointsPerSlice, 100) == 100])
			})
		}},
		{"many static endpoints edited", 2, func() {
			w.editBackend(t, key("big"), func(xb *v1alpha1.ExternalBackend) {
				eps := &xb.Spec.Sources[0].Static.Endpoints
				for range 10 {
					if c.rng.IntN(2) == 0 && len(*eps) > 1 {
						i := 1 + c.rng.IntN(len(*eps)-1)
						*eps = slices.Delete(*eps, i, i+1)
						continue
					}
					a := ip6(5, c.rng.IntN(400))
					if !slices.ContainsFunc(*eps, func(e v1alpha1.StaticEndpoint) bool { return e.Address == a }) {
						*eps = append(*eps, v1alpha1.StaticEndpoint{Address: a})
					}
				}
			})
		}},
		{"DNS answer changed", 4, func() {
			// The first address stays: the anchor.
			addrs := []string{ip4(1, 0)}
			for i := range 6 {
				if c.rng.IntN(2) == 0 {
					addrs = append(addrs, either(1+i, v4(1), v6(2)))
				}
			}
			w.setDNS(dnsA, addrs...)
		}},
		{"DNS answer changed (mixed)", 2, func() {
			addrs := []string{ip4(1, 10)} // also the static source's: one endpoint
			if c.rng.IntN(2) == 0 {
				addrs = append(addrs, ip4(1, 11))
			}
			if c.rng.IntN(2) == 0 {
				addrs = append(addrs, ip6(2, 11))
			}
			w.setDNS(dnsMixed, addrs...)
		}},
		{"Consul check flipped", 4, func() {
			ids := slices.DeleteFunc(c.consulIDs(consulA), func(id string) bool { return id == consulA+"-0" }) // not the anchor
			if len(ids) == 0 {
				return
			}
			id := ids[c.rng.IntN(len(ids))]
			status := api.HealthCritical
			if w.consulStatus(consulA, id) != api.HealthPassing {
				status = api.HealthPassing
			}
			w.setConsulCheck(t, consulA, id, status)
		}},
		{"Consul instance registered", 2, func() {
			c.next++
			w.registerConsul(t, consulA, fmt.Sprintf("%s-n%d", consulA, c.next), c.freeConsulAddress(consulA), api.HealthPassing)
		}},
		{"Consul instance deregistered", 2, func() {
			ids := slices.DeleteFunc(c.consulIDs(consulA), func(id string) bool { return id == consulA+"-0" })
			if len(ids) > 0 {
				w.deregisterConsul(t, consulA, ids[c.rng.IntN(len(ids))])
			}
		}},
		{"Consul check flipped (mixed)", 1, func() {
			id := consulMixed + "-0"
			status := api.HealthCritical
			if w.consulStatus(consulMixed, id) != api.HealthPassing {
				status = api.HealthPassing
			}
			w.setConsulCheck(t, consulMixed, id, status)
		}},
		{"EC2 instance state changed", 3, func() {
			ids := slices.DeleteFunc(c.ec2IDs(), func(id string) bool { return id == fmt.Sprintf("i-%s-0", p) }) // not the anchor
			if len(ids) == 0 {
				return
			}
			id := ids[c.rng.IntN(len(ids))]
			w.setEC2State(id, []string{"running", "pending", "stopped"}[c.rng.IntN(3)])
		}},
		{"EC2 instance launched", 1, func() {
			c.next++
			n := 10 + c.rng.IntN(80)
			w.putEC2(awstest.EC2Instance{ID: fmt.Sprintf("i-%s-n%d", p, c.next), State: "running", PrivateIP: ip4(0, 100+n), IPv6: ip6(3, n), Zone: awsRegion + "b", Tags: ec2Tags})
		}},
		{"EC2 instance terminated", 1, func() {
			ids := slices.DeleteFunc(c.ec2IDs(), func(id string) bool { return id == fmt.Sprintf("i-%s-0", p) })
			if len(ids) > 0 {
				w.deleteEC2(ids[c.rng.IntN(len(ids))])
			}
		}},
		{"RDS instance rebooted", 1, func() {
			w.setRDSStatus(rdsID, map[bool]string{true: "rebooting", false: "available"}[w.rdsStatus(rdsID) == "available"])
		}},
		{"ElastiCache failover", 2, func() {
			w.failoverCache(cacheID, cacheMembers[c.rng.IntN(len(cacheMembers))].ID)
		}},
		{"ElastiCache node rebooted", 1, func() {
			id := cacheMembers[c.rng.IntN(len(cacheMembers))].ID
			if w.cacheStatus(id) == "available" {
				w.setCacheStatus(id, "rebooting cluster nodes", "rebooting")
			} else {
				w.setCacheStatus(id, "available", "available")
			}
		}},
	}
	return c
}

// step makes one random change.
func (c *churner) step() {
	c.t.Helper()
	total := 0
	for _, o := range c.ops {
		total += o.weight
	}
	n := c.rng.IntN(total)
	for _, o := range c.ops {
		if n < o.weight {
			o.do()
			c.steps[o.name]++
			c.last = time.Now()
			return
		}
		n -= o.weight
	}
}

// churnFor makes random changes, 20 to 200 ms apart, for d.
func (c *churner) churnFor(d time.Duration) {
	c.t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		c.step()
		time.Sleep(time.Duration(20+c.rng.IntN(180)) * time.Millisecond)
	}
}

// summary says how many changes of each kind were made.
func (c *churner) summary() string {
	var parts []string
	total := 0
	for _, name := range slices.Sorted(maps.Keys(c.steps)) {
		parts = append(parts, fmt.Sprintf("%s %d", name, c.steps[name]))
		total += c.steps[name]
	}
	return fmt.Sprintf("%d source changes: %v", total, parts)
}

// consulIDs are the instance IDs of a Consul service, sorted.
func (c *churner) consulIDs(service string) []string {
	w := env.world
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.consul[service]))
}

// freeConsulAddress is a random address of 203.0.113.31-90 that no
// instance of service has: two instances at one address with different
// health would leave the address's health to the order Consul lists them
// in, which no model here can predict.
func (c *churner) freeConsulAddress(service string) string {
	w := env.world
	w.mu.Lock()
	defer w.mu.Unlock()
	used := map[string]bool{}
	for _, in := range w.consul[service] {
		used[in.address] = true
	}
	start := c.rng.IntN(60)
	for k := range 60 {
		if a := ip4(2, 30+(start+k)%60); !used[a] {
			return a
		}
	}
	return ip4(2, 30+start)
}

// ec2IDs are the IDs of this churner's EC2 instances, sorted.
func (c *churner) ec2IDs() []string {
	w := env.world
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for id, i := range w.ec2 {
		if i.Tags["chaos"] == c.prefix {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (w *world) consulStatus(service, id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.consul[service][id].status
}

func (w *world) cacheStatus(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.caches[id].Status
}

func (w *world) rdsStatus(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rds[id].Status
}
