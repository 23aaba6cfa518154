package sliceplan

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// FuzzPlanner plans for scenarios decoded from the fuzz input (see
// fuzzInput): desired groups of the three families with duplicates and
// unset conditions, and existing slices that are stale, overfull, empty,
// hold an endpoint twice or in two slices, carry extra addresses or
// someone else's metadata, next to foreign slices with the names the
// planner would pick. The planner's own invariants are the oracle:
//
//   - apply, the harness's stand-in for the API server, accepts every write:
//     updates and deletes of the slice as read, creates under a free name,
//     no addressType change;
//   - checkInvariants holds on the result: each desired endpoint exactly
//     once (but those the bound on slices leaves out), up to date, nothing
//     else published, every slice 1..size endpoints of its own family with
//     the template's metadata, no more slices than the bound, and a second
//     run over the result plans nothing (no write when nothing changed);
//   - every endpoint written carries exactly one address;
//   - the plan does not depend on the order of the existing slices, and
//     Compute leaves its input alone and shares no memory with its plan;
//   - churn-aware placement costs at most one write more than the same
//     input without it (see churn.go).
func FuzzPlanner(f *testing.F) {
	for _, seed := range [][]byte{
		nil,
		// Limit 2; one IPv4 group of 5 ready endpoints; db-ipv4-0 over the
		// limit with 3 of them and a stale one.
		{2, 0, 1, 0, 0, 5, 0, 4, 1, 4, 2, 4, 3, 4, 4, 4,
			1, 0, 0, 0, 0, 4, 0, 4, 0, 1, 4, 0, 2, 4, 0, 9, 4, 0, 0},
		// Limit 3, an annotation; IPv4 and IPv6 groups; db-ipv6-0 with
		// someone else's owner; db-ipv4-0 and db-ipv4-1 both holding
		// 192.0.2.2 (draining in one, with zone and hostname), an endpoint
		// with a second address; foreign db-ipv4-2 and db-ipv6-1.
		{3, 3, 2, 0, 0, 4, 1, 4, 2, 4, 3, 4, 4, 4, 1, 0, 3, 1, 4, 2, 4, 3, 4,
			3, 1, 0, 0, 1, 2, 1, 4, 0, 2, 4, 0,
			0, 0, 0, 0, 2, 1, 4, 0, 2, 4, 0,
			0, 1, 0, 0, 2, 2, 122, 0, 3, 4, 1,
			6},
		// Default limit, a new label; the FQDN group moves to port 5433;
		// db-fqdn-2 on 5432 and db-ipv4-0, no longer wanted, are stale;
		// all the names the planner would pick first are taken.
		{0, 1, 1, 2, 1, 3, 0, 4, 1, 4, 2, 4,
			2, 2, 2, 0, 0, 1, 5, 4, 0, 0, 0, 0, 0, 1, 7, 4, 0,
			15},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzInput(data)
		before := cloneInput(in)
		plan := Compute(in)
		reordered := in
		reordered.Existing = slices.Clone(in.Existing)
		slices.Reverse(reordered.Existing)
		if !reflect.DeepEqual(plan, Compute(reordered)) {
			t.Errorf("the plan depends on the order of the existing slices")
		}
		for _, s := range slices.Concat(plan.Create, plan.Update) {
			for _, ep := range s.Endpoints {
				if len(ep.Addresses) != 1 {
					t.Errorf("slice %s writes an endpoint with addresses %q, want exactly one", s.Name, ep.Addresses)
				}
			}
		}
		checkInvariants(t, in, apply(t, in, plan))
		blind := in
		blind.Volatile = nil
		if extra := writes(plan) - writes(Compute(blind)); extra > 1 {
			t.Errorf("churn-aware placement writes %d more than without it, want at most one more", extra)
		}
		scribble(plan)
		if !reflect.DeepEqual(in, before) {
			t.Errorf("Compute mutated its input, or its plan shares memory with it")
		}
	})
}

// fuzzBytes hands out the fuzz input a byte at a time, then zeros, so that
// every input decodes to a scenario and a short one to a small scenario.
type fuzzBytes []byte

func (b *fuzzBytes) next() int {
	if len(*b) == 0 {
		return 0
	}
	v := (*b)[0]
	*b = (*b)[1:]
	return int(v)
}

// fuzzFamilies are the address families of fuzzed endpoints, each with a
// pool of a few addresses so that groups and slices share some.
var fuzzFamilies = []struct {
	at   discoveryv1.AddressType
	addr func(int) string
}{{discoveryv1.AddressTypeIPv4, v4}, {discoveryv1.AddressTypeIPv6, v6}, {discoveryv1.AddressTypeFQDN, fqdn}}

// fuzzInput decodes a planning input, a byte a choice: the limit, the
// template's labels and annotations, the desired groups (family, ports,
// endpoints each), the existing slices (name, family, ports, metadata drift,
// endpoints each, some with an extra address), the foreign names taken and
// the bound on slices.
func fuzzInput(data []byte) Input {
	b := fuzzBytes(data)
	in := Input{Template: template(), MaxEndpointsPerSlice: []int{0, 1, 2, 3, 4, 7, 1000, 5000}[b.next()%8]}
	switch b.next() % 4 {
	case 1:
		in.Template.Labels["tier"] = "gold"
	case 2:
		in.Template.Annotations = map[string]string{} // the same as none
	case 3:
		in.Template.Annotations = map[string]string{"note": "x"}
	}
	for range b.next() % 5 {
		fam := fuzzFamilies[b.next()%3]
		g := Group{AddressType: fam.at, Ports: fuzzPorts(&b)}
		for range b.next() % 10 {
			g.Endpoints = append(g.Endpoints, fuzzEndpoint(&b, fam.addr))
		}
		in.Desired = append(in.Desired, g)
	}
	taken := map[string]bool{}
	for range b.next() % 6 {
		fam := fuzzFamilies[b.next()%3]
		name := "db-" + strings.ToLower(string(fam.at)) + "-" + strconv.Itoa(b.next()%5)
		s := slice(name, fam.at, 0, nil)
		s.Ports = fuzzPorts(&b)
		if b.next()%4 == 1 {
			s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "db", UID: "old-uid", Controller: ptr(true)}}
		}
		for range b.next() % 9 {
			ep := fuzzEndpoint(&b, fam.addr)
			if b.next()%8 == 1 {
				ep.Addresses = append(ep.Addresses, fam.addr(11))
			}
			s.Endpoints = append(s.Endpoints, ep)
		}
		if !taken[name] {
			taken[name] = true
			in.Existing = append(in.Existing, s)
		}
	}
	in.TakenNames = names(in.Existing)
	foreign := b.next()
	for i, name := range []string{"db-ipv4-0", "db-ipv4-2", "db-ipv6-1", "db-fqdn-0"} {
		if foreign&(1<<i) != 0 {
			in.TakenNames.Insert(name)
		}
	}
	in.MaxSlices = []int{0, 0, 1, 2, 3, 5}[b.next()%6]
	// Churn-aware placement: which existing slices carry the volatile
	// mark, and which of the first eight addresses of every family are
	// volatile (none: placement is churn-blind).
	marks := b.next()
	for i := range in.Existing {
		if marks&(1<<i) != 0 {
			in.Existing[i].Annotations = in.Template.metaFor(in.Existing[i].Endpoints, true)
		}
	}
	if volatile := b.next(); volatile != 0 {
		in.Volatile = sets.New[string]()
		for i := range 8 {
			if volatile&(1<<i) != 0 {
				in.Volatile.Insert(v4(i), v6(i), fqdn(i))
			}
		}
	}
	return in
}

// fuzzPorts is one of the port sets a group or slice may carry: the
// standard one, a changed port, none, or the standard one with the protocol
// left to the API server's default.
func fuzzPorts(b *fuzzBytes) []discoveryv1.EndpointPort {
	switch b.next() % 4 {
	case 0:
		return ports(port)
	case 1:
		return ports(port + 1)
	case 2:
		return nil
	}
	return []discoveryv1.EndpointPort{{Name: ptr("db"), Port: ptr[int32](port)}}
}

// fuzzEndpoint is an endpoint of the family's pool: an address among the
// first ten, each condition unset, true or false, and an optional zone and
// hostname.
func fuzzEndpoint(b *fuzzBytes, addr func(int) string) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{Addresses: []string{addr(b.next() % 10)}}
	conds := b.next()
	tri := func(v int) *bool { return []*bool{nil, ptr(true), ptr(false)}[v%3] }
	ep.Conditions = discoveryv1.EndpointConditions{Ready: tri(conds), Serving: tri(conds / 3), Terminating: tri(conds / 9)}
	if conds/27%3 != 0 {
		ep.Zone = ptr("zone-" + strconv.Itoa(conds/27%3))
	}
	if conds/81 != 0 {
		ep.Hostname = ptr("host-" + strconv.Itoa(conds/81))
	}
	return ep
}
