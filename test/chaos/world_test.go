package chaos_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	mdns "github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/test/awstest"
	"github.com/backendslice/backendslice/test/consultest"
	"github.com/backendslice/backendslice/test/e2e/framework"
)

// detectLag bounds how long after a source changes the controller can see
// it: a DNS name is looked up again within --dns-max-refresh (plus a query
// timeout), an AWS listing within --aws-refresh-interval, Consul and
// static changes arrive at once. A vanished endpoint may stay published
// (draining) for its drain period after the controller saw it go.
const detectLag = dnsMaxRefresh + 2*time.Second

// restartSlack is what each controller outage adds, on top of its length,
// before a drain that ran into it ends: a new process lists, syncs its
// caches and reconciles every backend before it gets to the expired one.
const restartSlack = 3 * time.Second

// consulInstance is one instance of a Consul service, as registered.
type consulInstance struct {
	address string
	// status is the instance's TTL check: passing, warning or critical.
	status string
}

// want is what a backend must publish for one address its sources report.
type want struct {
	serving bool
	// from names the source, for failure messages.
	from string
}

// outage is a time no controller was working: killed and not yet
// started again, no leader, or no API server.
type outage struct{ from, to time.Time }

// world is what the sources report now, kept by the test as it changes
// them (it is their only writer), and the specs it wrote. From the two it
// tells what every backend must publish: check compares that with the
// cluster.
type world struct {
	// served are the IP families the cluster gives Services addresses of.
	served map[corev1.IPFamily]bool

	mu       sync.Mutex
	dnsAddrs map[string][]string                  // fully qualified name -> A and AAAA values
	consul   map[string]map[string]consulInstance // service -> instance ID -> instance
	ec2      map[string]awstest.EC2Instance       // instance ID -> instance
	rds      map[string]awstest.DBInstance        // identifier -> instance
	groups   map[string]awstest.ReplicationGroup  // ElastiCache replication group ID -> group
	caches   map[string]awstest.CacheCluster      // cache cluster ID -> cluster (a group's member)
	specs    map[types.NamespacedName]*v1alpha1.ExternalBackend
	// vanished is when each endpoint that a backend's sources no longer
	// report stopped being reported: it may drain until then plus its
	// drain period (see allowance).
	vanished map[types.NamespacedName]map[string]time.Time
	outages  []outage
	// conflicts are backends whose Service name is taken by someone
	// else's Service: they must publish nothing.
	conflicts map[types.NamespacedName]bool
	foreign   []foreignObject
}

func newWorld(served map[corev1.IPFamily]bool) *world {
	return &world{
		served:    served,
		dnsAddrs:  map[string][]string{},
		consul:    map[string]map[string]consulInstance{},
		ec2:       map[string]awstest.EC2Instance{},
		rds:       map[string]awstest.DBInstance{},
		groups:    map[string]awstest.ReplicationGroup{},
		caches:    map[string]awstest.CacheCluster{},
		specs:     map[types.NamespacedName]*v1alpha1.ExternalBackend{},
		vanished:  map[types.NamespacedName]map[string]time.Time{},
		conflicts: map[types.NamespacedName]bool{},
	}
}

// change applies a change to the sources' state (under the lock) and
// records which endpoints it made vanish, and when: the moment the change
// was made, as the source made it.
func (w *world) change(apply func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := map[types.NamespacedName]map[string]want{}
	for k, xb := range w.specs {
		before[k] = w.expectedLocked(xb)
	}
	apply()
	now := time.Now()
	for k, xb := range w.specs {
		after := w.expectedLocked(xb)
		if w.vanished[k] == nil {
			w.vanished[k] = map[string]time.Time{}
		}
		for a := range before[k] {
			if _, still := after[a]; !still {
				w.vanished[k][a] = now
			}
		}
		for a := range after {
			delete(w.vanished[k], a)
		}
	}
}

// expected is what xb must publish now: every address its sources report,
// of the families its spec asks for and the cluster serves, with the
// health of the first source (in spec order) that reports it; an address
// one source reports twice (two EC2 instances) serves when either does.
func (w *world) expected(k types.NamespacedName) (map[string]want, *v1alpha1.ExternalBackend) {
	w.mu.Lock()
	defer w.mu.Unlock()
	xb := w.specs[k]
	if xb == nil {
		return nil, nil
	}
	return w.expectedLocked(xb), xb.DeepCopy()
}

func (w *world) expectedLocked(xb *v1alpha1.ExternalBackend) map[string]want {
	out := map[string]want{}
	if w.conflicts[types.NamespacedName{Namespace: xb.Namespace, Name: xb.Name}] {
		return out
	}
	// mine are the addresses the source at hand reported: one serves
	// when any of its reports does.
	var mine map[string]bool
	add := func(src, address string, serving bool) {
		a, err := netip.ParseAddr(address)
		if err != nil {
			return // names: no spec here publishes FQDN
		}
		fam, typ := corev1.IPv4Protocol, v1alpha1.AddressTypeIPv4
		if a.Is6() {
			fam, typ = corev1.IPv6Protocol, v1alpha1.AddressTypeIPv6
		}
		if !w.served[fam] || !slices.Contains(addressTypes(xb), typ) {
			return
		}
		if got, dup := out[a.String()]; !dup || (mine[a.String()] && serving && !got.serving) {
			out[a.String()], mine[a.String()] = want{serving: serving, from: src}, true
		}
	}
	for _, s := range xb.Spec.Sources {
		mine = map[string]bool{}
		switch {
		case s.Static != nil:
			for _, e := range s.Static.Endpoints {
				add("static "+s.Name, e.Address, e.Health == "" || e.Health == v1alpha1.HealthHealthy)
			}
		case s.DNS != nil:
			for _, a := range w.dnsAddrs[mdns.CanonicalName(s.DNS.Name)] {
				add("dns "+s.DNS.Name, a, true)
			}
		case s.Consul != nil:
			for _, id := range slices.Sorted(maps.Keys(w.consul[s.Consul.Service])) {
				in := w.consul[s.Consul.Service][id]
				serving := in.status == api.HealthPassing || (in.status == api.HealthWarning && !s.Consul.OnlyPassing)
				add("consul "+s.Consul.Service+"/"+id, in.address, serving)
			}
		case s.AWSEC2 != nil:
			for _, id := range slices.Sorted(maps.Keys(w.ec2)) {
				i := w.ec2[id]
				if !selectsEC2(s.AWSEC2, i) || (i.State != "running" && i.State != "pending") {
					continue
				}
				add("awsEC2 "+id, i.PrivateIP, i.State == "running")
				add("awsEC2 "+id, i.IPv6, i.State == "running")
			}
		case s.AWSElastiCache != nil:
			g := w.groups[s.AWSElastiCache.ReplicationGroupID]
			for _, sh := range g.Shards {
				for _, m := range sh.Members {
					role := s.AWSElastiCache.Role
					if (role == v1alpha1.AWSCacheRolePrimary && !m.Primary) || (role == v1alpha1.AWSCacheRoleReaders && m.Primary) {
						continue
					}
					c := w.caches[m.CacheCluster]
					for _, n := range c.Nodes {
						for _, ip := range n.IPs {
							add("awsElastiCache "+c.ID, ip, g.Status == "available" && c.Status == "available" && n.Status == "available")
						}
					}
				}
			}
		case s.AWSRDS != nil:
			if i, ok := w.rds[s.AWSRDS.DBInstanceIdentifier]; ok {
				serving := i.Status == "available" || i.Status == "backing-up" || i.Status == "modifying"
				for _, ip := range i.IPs {
					add("awsRDS "+i.Identifier, ip, serving)
				}
			}
		}
	}
	return out
}

// selectsEC2 tells whether an awsEC2 source picks instance i.
func selectsEC2(src *v1alpha1.AWSEC2Source, i awstest.EC2Instance) bool {
	if len(src.InstanceIDs) > 0 {
		return slices.Contains(src.InstanceIDs, i.ID)
	}
	for k, v := range src.Tags {
		if i.Tags[k] != v {
			return false
		}
	}
	return true
}

// addressTypes are the spec's, or the API's default.
func addressTypes(xb *v1alpha1.ExternalBackend) []v1alpha1.AddressType {
	if len(xb.Spec.AddressTypes) == 0 {
		return []v1alpha1.AddressType{v1alpha1.AddressTypeIPv4, v1alpha1.AddressTypeIPv6}
	}
	return xb.Spec.AddressTypes
}

// serviceName is the Service the backend publishes through.
func serviceName(xb *v1alpha1.ExternalBackend) string {
	if xb.Spec.Service.Name != "" {
		return xb.Spec.Service.Name
	}
	return xb.Name
}

// drainPeriod is the spec's, or the controller's default (30s).
func drainPeriod(xb *v1alpha1.ExternalBackend) time.Duration {
	if xb.Spec.DrainPeriod != nil {
		return xb.Spec.DrainPeriod.Duration
	}
	return 30 * time.Second
}

// allowance is how long after it vanished an endpoint of k may still be
// published as draining at now: its drain period, the time the controller
// takes to see the change, and the time no controller was working since.
func (w *world) allowance(k types.NamespacedName, addr string, now time.Time) (vanishedAt time.Time, allowed time.Duration, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	vanishedAt, known = w.vanished[k][addr]
	xb := w.specs[k]
	if !known || xb == nil {
		return vanishedAt, 0, false
	}
	allowed = drainPeriod(xb) + detectLag
	for _, o := range w.outages {
		to := o.to
		if to.IsZero() {
			to = now
		}
		if to.Before(vanishedAt) {
			continue
		}
		allowed += to.Sub(later(o.from, vanishedAt)) + restartSlack
	}
	return vanishedAt, allowed, true
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// down records that no controller works from at on, up that one works again.
func (w *world) down(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.outages = append(w.outages, outage{from: at})
}

func (w *world) up(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.outages); n > 0 && w.outages[n-1].to.IsZero() {
		w.outages[n-1].to = at
	}
}

// keys are the backends of namespaces, sorted.
func (w *world) keys(namespaces ...string) []types.NamespacedName {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []types.NamespacedName
	for k := range w.specs {
		if slices.Contains(namespaces, k.Namespace) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int {
		return strings.Compare(a.String(), b.String())
	})
	return out
}

// spec is the backend as the test last wrote it.
func (w *world) spec(k types.NamespacedName) *v1alpha1.ExternalBackend {
	w.mu.Lock()
	defer w.mu.Unlock()
	if xb := w.specs[k]; xb != nil {
		return xb.DeepCopy()
	}
	return nil
}

// --- Changes to backends and sources. Each makes the change for real and
// then records it; a failure fails the test.

// createBackend creates xb and records its spec.
func (w *world) createBackend(t *testing.T, xb *v1alpha1.ExternalBackend) {
	t.Helper()
	if err := framework.E().Client.Create(context.Background(), xb); err != nil {
		t.Fatalf("creating ExternalBackend %s/%s: %v", xb.Namespace, xb.Name, err)
	}
	w.change(func() { w.specs[types.NamespacedName{Namespace: xb.Namespace, Name: xb.Name}] = xb.DeepCopy() })
}

// markConflict records that k's Service name is someone else's.
func (w *world) markConflict(k types.NamespacedName) {
	w.change(func() { w.conflicts[k] = true })
}

// editBackend changes the spec of k, retrying on conflicts with the
// controller's status writes, and records the new spec.
func (w *world) editBackend(t *testing.T, k types.NamespacedName, edit func(*v1alpha1.ExternalBackend)) {
	t.Helper()
	xb := w.spec(k)
	if xb == nil {
		t.Fatalf("no backend %s", k)
	}
	if err := framework.Update(t, xb, edit); err != nil {
		t.Fatalf("editing ExternalBackend %s: %v", k, err)
	}
	w.change(func() { w.specs[k] = xb.DeepCopy() })
}

// forget drops the backends of namespaces from the model.
func (w *world) forget(namespaces ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.specs {
		if slices.Contains(namespaces, k.Namespace) {
			delete(w.specs, k)
			delete(w.vanished, k)
			delete(w.conflicts, k)
		}
	}
	w.foreign = slices.DeleteFunc(w.foreign, func(f foreignObject) bool { return slices.Contains(namespaces, f.key.Namespace) })
}

// setDNS makes name answer with addrs (A and AAAA records, TTL 1s).
func (w *world) setDNS(name string, addrs ...string) {
	var v4, v6 []string
	for _, a := range addrs {
		if netip.MustParseAddr(a).Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	w.change(func() {
		env.dns.Set(name, mdns.TypeA, 1, v4...)
		env.dns.Set(name, mdns.TypeAAAA, 1, v6...)
		w.dnsAddrs[mdns.CanonicalName(name)] = slices.Clone(addrs)
	})
}

// registerConsul registers (or re-registers) an instance of service.
func (w *world) registerConsul(t *testing.T, service, id, address, status string) {
	t.Helper()
	if err := w.tryRegisterConsul(service, id, address, status); err != nil {
		t.Fatal(err)
	}
}

// tryRegisterConsul is registerConsul for a caller that handles the error.
func (w *world) tryRegisterConsul(service, id, address, status string) error {
	var err error
	w.change(func() {
		if err = env.consul.Register(consultest.Service{ID: id, Name: service, Address: address, Status: status}); err != nil {
			return
		}
		if w.consul[service] == nil {
			w.consul[service] = map[string]consulInstance{}
		}
		w.consul[service][id] = consulInstance{address: address, status: status}
	})
	if err != nil {
		return fmt.Errorf("registering Consul instance %s of %s: %w", id, service, err)
	}
	return nil
}

// deregisterConsul removes an instance of service.
func (w *world) deregisterConsul(t *testing.T, service, id string) {
	t.Helper()
	var err error
	w.change(func() {
		if err = env.consul.Deregister(id); err == nil {
			delete(w.consul[service], id)
		}
	})
	if err != nil {
		t.Fatalf("deregistering Consul instance %s of %s: %v", id, service, err)
	}
}

// setConsulCheck flips the TTL check of an instance of service.
func (w *world) setConsulCheck(t *testing.T, service, id, status string) {
	t.Helper()
	if err := w.trySetConsulCheck(service, id, status); err != nil {
		t.Fatal(err)
	}
}

// trySetConsulCheck is setConsulCheck for a goroutine other than the
// test's, which must not fail the test itself.
func (w *world) trySetConsulCheck(service, id, status string) error {
	var err error
	w.change(func() {
		if err = env.consul.SetCheck(id, status); err == nil {
			in := w.consul[service][id]
			in.status = status
			w.consul[service][id] = in
		}
	})
	if err != nil {
		return fmt.Errorf("setting the check of Consul instance %s to %s: %w", id, status, err)
	}
	return nil
}

// reregisterConsul registers every instance of the model again: a dev
// agent that was stopped comes back with an empty catalog.
func (w *world) reregisterConsul(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	all := map[string]map[string]consulInstance{}
	for svc, ins := range w.consul {
		all[svc] = maps.Clone(ins)
	}
	w.mu.Unlock()
	for _, svc := range slices.Sorted(maps.Keys(all)) {
		for _, id := range slices.Sorted(maps.Keys(all[svc])) {
			in := all[svc][id]
			if err := env.consul.Register(consultest.Service{ID: id, Name: svc, Address: in.address, Status: in.status}); err != nil {
				t.Fatalf("registering Consul instance %s of %s again: %v", id, svc, err)
			}
		}
	}
}

// putEC2 adds or replaces an EC2 instance.
func (w *world) putEC2(i awstest.EC2Instance) {
	w.change(func() {
		env.aws.PutEC2Instance(i)
		w.ec2[i.ID] = i
	})
}

// setEC2State changes the state of an EC2 instance.
func (w *world) setEC2State(id, state string) {
	w.change(func() {
		env.aws.SetEC2State(id, state)
		i := w.ec2[id]
		i.State = state
		w.ec2[id] = i
	})
}

// deleteEC2 removes an EC2 instance.
func (w *world) deleteEC2(id string) {
	w.change(func() {
		env.aws.DeleteEC2Instance(id)
		delete(w.ec2, id)
	})
}

// putRDS adds or replaces an RDS instance. Its endpoint address is one of
// its IPs written as a literal, which the controller's resolver returns as
// it is: the child process cannot be pointed at the fake's resolver.
func (w *world) putRDS(i awstest.DBInstance) {
	w.change(func() {
		env.aws.PutDBInstance(i)
		w.rds[i.Identifier] = i
	})
}

// putCacheGroup adds an ElastiCache replication group of one shard, one
// member cache cluster for each of clusters (the first the primary). Its
// nodes' endpoint addresses are IPs written as literals, as putRDS's are.
func (w *world) putCacheGroup(id string, clusters ...awstest.CacheCluster) {
	w.change(func() {
		g := awstest.ReplicationGroup{ID: id, Status: "available", Shards: []awstest.Shard{{ID: "0001"}}}
		for k, c := range clusters {
			env.aws.PutCacheCluster(c)
			w.caches[c.ID] = c
			g.Shards[0].Members = append(g.Shards[0].Members, awstest.ShardMember{CacheCluster: c.ID, Primary: k == 0})
		}
		env.aws.PutReplicationGroup(g)
		w.groups[id] = g
	})
}

// failoverCache makes cluster the primary of group's shard.
func (w *world) failoverCache(group, cluster string) {
	w.change(func() {
		env.aws.FailoverShard(group, "0001", cluster)
		g := w.groups[group]
		members := slices.Clone(g.Shards[0].Members)
		for k := range members {
			members[k].Primary = members[k].CacheCluster == cluster
		}
		g.Shards = []awstest.Shard{{ID: "0001", Members: members}}
		w.groups[group] = g
	})
}

// setCacheStatus sets the status of a cache cluster and of its nodes.
func (w *world) setCacheStatus(id, cluster, node string) {
	w.change(func() {
		set := func(c *awstest.CacheCluster) {
			c.Status = cluster
			c.Nodes = slices.Clone(c.Nodes)
			for k := range c.Nodes {
				c.Nodes[k].Status = node
			}
		}
		env.aws.UpdateCacheCluster(id, set)
		c := w.caches[id]
		set(&c)
		w.caches[id] = c
	})
}

// setRDSStatus changes the status of an RDS instance.
func (w *world) setRDSStatus(id, status string) {
	w.change(func() {
		env.aws.UpdateDBInstance(id, func(i *awstest.DBInstance) { i.Status = status })
		i := w.rds[id]
		i.Status = status
		w.rds[id] = i
	})
}

// --- Spec builders.

func ec2Source(name string, tags map[string]string) v1alpha1.Source {
	return v1alpha1.Source{Name: name, AWSEC2: &v1alpha1.AWSEC2Source{Region: awsRegion, Tags: tags}}
}

func cacheSource(name, group string, role v1alpha1.AWSCacheRole) v1alpha1.Source {
	return v1alpha1.Source{Name: name, AWSElastiCache: &v1alpha1.AWSElastiCacheSource{Region: awsRegion, ReplicationGroupID: group, Role: role}}
}

func rdsSource(name, id string) v1alpha1.Source {
	return v1alpha1.Source{Name: name, AWSRDS: &v1alpha1.AWSRDSSource{Region: awsRegion, DBInstanceIdentifier: id}}
}

// --- Addresses: documentation ranges only, as endpoint data; nothing
// connects to them.

// ip4 is the i-th address (0-253) of documentation block b: 0 is
// 192.0.2.0/24, 1 is 198.51.100.0/24, 2 is 203.0.113.0/24.
func ip4(b, i int) string {
	blocks := []string{"192.0.2.", "198.51.100.", "203.0.113."}
	return fmt.Sprintf("%s%d", blocks[b], i+1)
}

// ip6 is address i of subnet n of 2001:db8::/32.
func ip6(n, i int) string {
	return netip.MustParseAddr(fmt.Sprintf("2001:db8:%x::%x", n, i+1)).String()
}

// isIPv6CIDR tells whether a CIDR is of the IPv6 family.
func isIPv6CIDR(cidr string) bool {
	p, err := netip.ParsePrefix(cidr)
	return err == nil && p.Addr().Is6()
}

// newRand is the random source of one test: the run's seed and the test's
// name, so that each test draws the same sequence whatever ran before it.
func newRand(t *testing.T) *rand.Rand {
	h := uint64(14695981039346656037)
	for _, c := range []byte(t.Name()) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	t.Logf("random choices: seed %d (replay with -args -seed=%d -run '^%s$')", env.seed, env.seed, t.Name())
	return rand.New(rand.NewPCG(uint64(env.seed), h))
}
