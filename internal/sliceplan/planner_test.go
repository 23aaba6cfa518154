package sliceplan

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

const (
	ipv4 = discoveryv1.AddressTypeIPv4
	ipv6 = discoveryv1.AddressTypeIPv6
	port = 5432
)

// planCase is one planning run: the counts of each kind of write, and where
// every endpoint sits once the plan is applied (slice name -> addresses).
// Every case also goes through checkInvariants and the mutation checks.
type planCase struct {
	name     string
	max      int
	desired  []Group
	existing []discoveryv1.EndpointSlice
	template func(*Template) // changes to the standard template, if any
	foreign  []string        // names of slices in the namespace that are not ours

	creates, updates, deletes int
	want                      map[string][]string

	// maxSlices bounds the slices; size, when set, is the slice size the
	// plan must use, and leftOut the addresses it must leave out.
	maxSlices int
	size      int
	leftOut   []string
}

func (tc planCase) input() Input {
	in := Input{
		Template:             template(),
		Desired:              tc.desired,
		Existing:             tc.existing,
		TakenNames:           names(tc.existing).Insert(tc.foreign...),
		MaxEndpointsPerSlice: tc.max,
		MaxSlices:            tc.maxSlices,
	}
	if tc.template != nil {
		tc.template(&in.Template)
	}
	return in
}

func runCases(t *testing.T, cases []planCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.input()
			before := cloneInput(in)
			plan := Compute(in)
			got := [3]int{len(plan.Create), len(plan.Update), len(plan.Delete)}
			if want := [3]int{tc.creates, tc.updates, tc.deletes}; got != want {
				t.Errorf("creates, updates, deletes = %v, want %v", got, want)
			}
			if tc.size != 0 && plan.Size != tc.size {
				t.Errorf("slice size %d, want %d", plan.Size, tc.size)
			}
			var left []string
			for _, g := range plan.LeftOut {
				left = append(left, g.addresses()...)
			}
			if !slices.Equal(left, tc.leftOut) {
				t.Errorf("left out %s, want %s", brief(left), brief(tc.leftOut))
			}
			after := apply(t, in, plan)
			checkPlacement(t, after, tc.want)
			checkInvariants(t, in, after)
			scribble(plan)
			if !reflect.DeepEqual(in, before) {
				t.Errorf("Compute mutated its input, or its plan shares memory with it")
			}
		})
	}
}

func checkPlacement(t *testing.T, got []discoveryv1.EndpointSlice, want map[string][]string) {
	t.Helper()
	have := map[string][]string{}
	for _, s := range got {
		for _, ep := range s.Endpoints {
			have[s.Name] = append(have[s.Name], firstAddress(&ep))
		}
	}
	for _, name := range sets.List(sets.KeySet(have).Union(sets.KeySet(want))) {
		h, w := slices.Sorted(slices.Values(have[name])), slices.Sorted(slices.Values(want[name]))
		if !slices.Equal(h, w) {
			t.Errorf("slice %s holds %d endpoints %s, want %d %s", name, len(h), brief(h), len(w), brief(w))
		}
	}
}

func brief(addrs []string) string {
	if len(addrs) > 6 {
		return fmt.Sprint(addrs[:3], " ... ", addrs[len(addrs)-3:])
	}
	return fmt.Sprint(addrs)
}

// sliceName is the name the planner gives the k-th slice of addr's family.
func sliceName(addr func(int) string, k int) string {
	return "db-" + strings.ToLower(string(family(addr(0)))) + "-" + strconv.Itoa(k)
}

// chunks splits addr(0), addr(1), ... into consecutive runs of the given
// sizes, named like the planner names its slices.
func chunks(addr func(int) string, sizes ...int) map[string][]string {
	out := map[string][]string{}
	lo := 0
	for k, n := range sizes {
		out[sliceName(addr, k)] = span(addr, lo, lo+n)
		lo += n
	}
	return out
}

// existingChunks is chunks as slices of ours on the standard port.
func existingChunks(addr func(int) string, sizes ...int) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	runs := chunks(addr, sizes...)
	for k := range sizes {
		name := sliceName(addr, k)
		out = append(out, slice(name, family(addr(0)), port, endpoints(runs[name])))
	}
	return out
}

func repeat(n, size int) []int { return slices.Repeat([]int{size}, n) }

func TestComputeUpstreamScenarios(t *testing.T) {
	// Upstream's "some preexisting" layouts: a quarter of the endpoints in
	// each of two slices.
	quarter := func(r, n int) func(int) bool { return func(i int) bool { return i%4 == r && i < n-4 } }
	// Upstream's "update packing": 80 and 20 endpoints, every tenth draining.
	packing := func() []discoveryv1.Endpoint {
		eps := endpoints(span(v4, 0, 80), span(v4, 100, 120), span(v4, 200, 215))
		for i := range eps[:100] {
			if i%10 == 0 {
				eps[i] = draining(eps[i].Addresses[0])
			}
		}
		return eps
	}
	var named []Group
	for k := range 5 {
		named = append(named, group(ipv4, 8080+int32(k), endpoints(where(v4, 300, func(i int) bool { return i%5 == k }))))
	}

	runCases(t, []planCase{{
		name:    "no slices yet: 250 endpoints are 3 creates",
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 250)))},
		creates: 3,
		want:    chunks(v4, 100, 100, 50),
	}, {
		name:    "some preexisting: full creates first, the rest tops up the fullest slice",
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 250)))},
		existing: []discoveryv1.EndpointSlice{
			slice("db-ipv4-1", ipv4, port, endpoints(where(v4, 250, quarter(1, 250)))),
			slice("db-ipv4-2", ipv4, port, endpoints(where(v4, 250, quarter(3, 250)))),
		},
		creates: 1, updates: 1,
		want: map[string][]string{
			"db-ipv4-0": where(v4, 200, func(i int) bool { return i%2 == 0 }),
			"db-ipv4-1": where(v4, 250, func(i int) bool { return quarter(1, 250)(i) || i >= 200 && (i%2 == 0 || i >= 247) }),
			"db-ipv4-2": where(v4, 250, quarter(3, 250)),
		},
	}, {
		name:    "some preexisting, worse allocation: 2 creates beat 2 updates and a create",
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 300)))},
		existing: []discoveryv1.EndpointSlice{
			slice("db-ipv4-1", ipv4, port, endpoints(where(v4, 300, quarter(1, 300)))),
			slice("db-ipv4-2", ipv4, port, endpoints(where(v4, 300, quarter(3, 300)))),
		},
		creates: 2,
		want: map[string][]string{
			"db-ipv4-0": where(v4, 200, func(i int) bool { return i%2 == 0 }),
			"db-ipv4-1": where(v4, 300, quarter(1, 300)),
			"db-ipv4-2": where(v4, 300, quarter(3, 300)),
			"db-ipv4-3": where(v4, 300, func(i int) bool { return i >= 200 && (i%2 == 0 || i >= 297) }),
		},
	}, {
		name:    "update packing: additions go to the fullest slice being updated",
		desired: []Group{group(ipv4, port, packing())},
		existing: []discoveryv1.EndpointSlice{ // the fuller slice is not the first by name
			slice("db-ipv4-2", ipv4, port, endpoints(span(v4, 0, 80))),
			slice("db-ipv4-1", ipv4, port, endpoints(span(v4, 100, 120))),
		},
		updates: 2,
		want: map[string][]string{
			"db-ipv4-1": span(v4, 100, 120),
			"db-ipv4-2": slices.Concat(span(v4, 0, 80), span(v4, 200, 215)),
		},
	}, {
		name:     "recycling, before: underfull slices are not repacked when nothing changed",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 300)))},
		existing: existingChunks(v4, repeat(10, 30)...),
		want:     chunks(v4, repeat(10, 30)...),
	}, {
		name:     "recycling: a port change rewrites 3 slices in place and deletes 7",
		desired:  []Group{group(ipv4, port+1, endpoints(span(v4, 0, 300)))},
		existing: existingChunks(v4, repeat(10, 30)...),
		updates:  3, deletes: 7,
		want: chunks(v4, 100, 100, 100),
	}, {
		name:     "port change: every slice is updated, none replaced",
		desired:  []Group{group(ipv4, port+1, endpoints(span(v4, 0, 250)))},
		existing: existingChunks(v4, 100, 100, 50),
		updates:  3,
		want:     chunks(v4, 100, 100, 50),
	}, {
		name:     "label change: every slice is updated",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 250)))},
		existing: existingChunks(v4, 100, 100, 50),
		template: func(t *Template) { t.Labels["foo"] = "bar" },
		updates:  3,
		want:     chunks(v4, 100, 100, 50),
	}, {
		name:    "deprecated IP address type: its slices are replaced, never recycled",
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 80), span(v4, 100, 150)))},
		existing: []discoveryv1.EndpointSlice{
			slice("db-ip-1", "IP", port, endpoints(span(v4, 0, 80))),
			slice("db-ip-2", "IP", port, endpoints(span(v4, 100, 150))),
		},
		creates: 2, deletes: 2,
		want: map[string][]string{
			"db-ipv4-0": slices.Concat(span(v4, 0, 80), span(v4, 100, 120)),
			"db-ipv4-1": span(v4, 120, 150),
		},
	}, {
		name:    "named ports: each port set gets its own slices",
		desired: named,
		creates: 5,
		want: map[string][]string{
			"db-ipv4-0": named[0].addresses(), "db-ipv4-1": named[1].addresses(), "db-ipv4-2": named[2].addresses(),
			"db-ipv4-3": named[3].addresses(), "db-ipv4-4": named[4].addresses(),
		},
	}, {
		name:     "recreated Service: the old owner's slice is adopted in place",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 10)))},
		existing: []discoveryv1.EndpointSlice{with(existingChunks(v4, 10)[0], func(s *discoveryv1.EndpointSlice) { s.OwnerReferences[0].UID = "old-svc-uid" })},
		updates:  1,
		want:     chunks(v4, 10),
	}})
}

func (g Group) addresses() []string {
	var out []string
	for _, ep := range g.Endpoints {
		out = append(out, firstAddress(&ep))
	}
	return out
}

func TestComputeEndpointChanges(t *testing.T) {
	oneDraining := endpoints(span(v4, 0, 250))
	oneDraining[150] = draining(v4(150))
	blank := []discoveryv1.Endpoint{{}, ready(v4(0))}

	runCases(t, []planCase{{
		name:     "nothing changed: no write",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 250)))},
		existing: existingChunks(v4, 100, 100, 50),
		want:     chunks(v4, 100, 100, 50),
	}, {
		name: "nothing desired and nothing owned: no write",
		want: map[string][]string{},
	}, {
		name:     "a changed endpoint rewrites only its own slice",
		desired:  []Group{group(ipv4, port, oneDraining)},
		existing: existingChunks(v4, 100, 100, 50),
		updates:  1,
		want:     chunks(v4, 100, 100, 50),
	}, {
		name:     "replace one endpoint: one update",
		desired:  []Group{group(ipv4, port, endpoints([]string{v4(0), v4(1), v4(3)}))},
		existing: []discoveryv1.EndpointSlice{slice("db-ipv4-0", ipv4, port, endpoints(span(v4, 0, 3)))},
		updates:  1,
		want:     map[string][]string{"db-ipv4-0": {v4(0), v4(1), v4(3)}},
	}, {
		name:     "replace the only endpoint of a slice: one update, not a delete and a create",
		desired:  []Group{group(ipv4, port, endpoints([]string{v4(1)}))},
		existing: existingChunks(v4, 1),
		updates:  1,
		want:     map[string][]string{"db-ipv4-0": {v4(1)}},
	}, {
		name:     "removed endpoints leave their slices; a slice left empty is deleted",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 150)))},
		existing: existingChunks(v4, 100, 100, 50),
		updates:  1, deletes: 1,
		want: chunks(v4, 100, 50),
	}, {
		name:     "additions go to the fullest unchanged slice that can take them all",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 50), span(v4, 100, 170), span(v4, 200, 285), span(v4, 300, 320)))},
		existing: []discoveryv1.EndpointSlice{slice("db-ipv4-0", ipv4, port, endpoints(span(v4, 0, 50))), slice("db-ipv4-1", ipv4, port, endpoints(span(v4, 100, 170))), slice("db-ipv4-2", ipv4, port, endpoints(span(v4, 200, 285)))},
		updates:  1,
		want:     map[string][]string{"db-ipv4-0": span(v4, 0, 50), "db-ipv4-1": slices.Concat(span(v4, 100, 170), span(v4, 300, 320)), "db-ipv4-2": span(v4, 200, 285)},
	}, {
		name:     "a slice emptied by removals takes the additions, sparing an untouched slice",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 50), []string{v4(200)}))},
		existing: []discoveryv1.EndpointSlice{slice("db-ipv4-0", ipv4, port, endpoints(span(v4, 0, 50))), slice("db-ipv4-1", ipv4, port, endpoints([]string{v4(100)}))},
		updates:  1,
		want:     map[string][]string{"db-ipv4-0": span(v4, 0, 50), "db-ipv4-1": {v4(200)}},
	}, {
		name:     "a slice of ours without endpoints is deleted",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 1)))},
		existing: []discoveryv1.EndpointSlice{slice("db-ipv4-0", ipv4, port, nil), slice("db-ipv4-1", ipv4, port, endpoints(span(v4, 0, 1)))},
		deletes:  1,
		want:     map[string][]string{"db-ipv4-1": {v4(0)}},
	}, {
		name:     "a slice of ours without endpoints takes additions, sparing a fuller one",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 2)))},
		existing: []discoveryv1.EndpointSlice{slice("db-ipv4-0", ipv4, port, nil), slice("db-ipv4-1", ipv4, port, endpoints(span(v4, 0, 1)))},
		updates:  1,
		want:     map[string][]string{"db-ipv4-0": {v4(1)}, "db-ipv4-1": {v4(0)}},
	}, {
		name:     "scale to zero: every slice is deleted",
		desired:  []Group{group(ipv4, port, nil)},
		existing: existingChunks(v4, 100, 100, 50),
		deletes:  3,
		want:     map[string][]string{},
	}, {
		name:     "no groups at all: every slice is deleted",
		existing: existingChunks(v4, 100, 100, 50),
		deletes:  3,
		want:     map[string][]string{},
	}, {
		name:    "groups with the same address type and port set are merged",
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 3))), group(ipv4, port, endpoints(span(v4, 2, 5)))},
		creates: 1,
		want:    chunks(v4, 5),
	}, {
		name:     "endpoints without an address are ignored in input and removed from slices",
		desired:  []Group{group(ipv4, port, blank)},
		existing: []discoveryv1.EndpointSlice{slice("db-ipv4-0", ipv4, port, blank)},
		updates:  1,
		want:     chunks(v4, 1),
	}, {
		name: "nil conditions and server-defaulted ports read as what was written",
		desired: []Group{{
			AddressType: ipv4,
			Ports:       []discoveryv1.EndpointPort{{Port: ptr[int32](port)}}, // name and protocol left to the server
			Endpoints:   endpoints(span(v4, 0, 3)),
		}},
		existing: []discoveryv1.EndpointSlice{with(existingChunks(v4, 3)[0], func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{{Name: ptr(""), Port: ptr[int32](port), Protocol: ptr(corev1.ProtocolTCP)}}
			for i := range s.Endpoints {
				s.Endpoints[i].Conditions = discoveryv1.EndpointConditions{}
			}
		})},
		want: chunks(v4, 3),
	}})
}

func TestComputeDriftAndDuplicates(t *testing.T) {
	drifted := func(change func(*discoveryv1.EndpointSlice)) []discoveryv1.EndpointSlice {
		return []discoveryv1.EndpointSlice{existingChunks(v4, 100, 50)[0], with(existingChunks(v4, 100, 50)[1], change)}
	}
	drift := func(name string, change func(*discoveryv1.EndpointSlice)) planCase {
		return planCase{
			name:     name,
			desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 150)))},
			existing: drifted(change),
			updates:  1,
			want:     chunks(v4, 100, 50),
		}
	}
	// Both slices carry these annotations; the template then drops them.
	annotated := func(s *discoveryv1.EndpointSlice) { s.Annotations = map[string]string{"note": "x"} }

	runCases(t, []planCase{
		drift("owner drift: another UID", func(s *discoveryv1.EndpointSlice) { s.OwnerReferences[0].UID = "other" }),
		drift("owner drift: a second ownerReference", func(s *discoveryv1.EndpointSlice) {
			s.OwnerReferences = append(s.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "cm"})
		}),
		drift("owner drift: not marked as controller", func(s *discoveryv1.EndpointSlice) { s.OwnerReferences[0].Controller = nil }),
		drift("label drift: a label added by someone else", func(s *discoveryv1.EndpointSlice) { s.Labels["extra"] = "x" }),
		drift("label drift: managed-by removed", func(s *discoveryv1.EndpointSlice) { delete(s.Labels, discoveryv1.LabelManagedBy) }),
		drift("annotation drift: an annotation added by someone else", func(s *discoveryv1.EndpointSlice) { s.Annotations = map[string]string{"x": "y"} }),
		{
			name:     "annotation change in the template: every slice is updated",
			desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 150)))},
			existing: existingChunks(v4, 100, 50),
			template: func(t *Template) { t.Annotations = map[string]string{"note": "x"} },
			updates:  2,
			want:     chunks(v4, 100, 50),
		}, {
			name:     "annotations dropped from the template: every slice is updated",
			desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 150)))},
			existing: []discoveryv1.EndpointSlice{with(existingChunks(v4, 100, 50)[0], annotated), with(existingChunks(v4, 100, 50)[1], annotated)},
			updates:  2,
			want:     chunks(v4, 100, 50),
		},
		{
			name:     "empty and nil annotation maps are the same: no write",
			desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 150)))},
			existing: drifted(func(s *discoveryv1.EndpointSlice) { s.Annotations = map[string]string{} }),
			want:     chunks(v4, 100, 50),
		},
		{
			name:    "duplicate across two slices: kept in the first by name only",
			desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 3)))},
			existing: []discoveryv1.EndpointSlice{
				slice("db-ipv4-b", ipv4, port, endpoints(span(v4, 1, 3))),
				slice("db-ipv4-a", ipv4, port, endpoints(span(v4, 0, 2))),
			},
			updates: 1,
			want:    map[string][]string{"db-ipv4-a": span(v4, 0, 2), "db-ipv4-b": {v4(2)}},
		}, {
			name:    "duplicate that is all a slice holds: that slice is deleted",
			desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 2)))},
			existing: []discoveryv1.EndpointSlice{
				slice("db-ipv4-a", ipv4, port, endpoints(span(v4, 0, 2))),
				slice("db-ipv4-b", ipv4, port, endpoints(span(v4, 1, 2))),
			},
			deletes: 1,
			want:    map[string][]string{"db-ipv4-a": span(v4, 0, 2)},
		}, {
			name:     "duplicate inside one slice is dropped",
			desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 2)))},
			existing: []discoveryv1.EndpointSlice{slice("db-ipv4-0", ipv4, port, endpoints(span(v4, 0, 2), span(v4, 0, 1)))},
			updates:  1,
			want:     chunks(v4, 2),
		}, {
			name:    "duplicate in the desired group: the first one wins",
			desired: []Group{group(ipv4, port, append(endpoints(span(v4, 0, 2)), draining(v4(0))))},
			creates: 1,
			want:    chunks(v4, 2),
		},
	})
}

func TestComputeAddressFamilies(t *testing.T) {
	runCases(t, []planCase{{
		name:    "dual-stack: each family gets its own slices",
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 3))), group(ipv6, port, endpoints(span(v6, 0, 2)))},
		creates: 2,
		want:    map[string][]string{"db-ipv4-0": span(v4, 0, 3), "db-ipv6-0": span(v6, 0, 2)},
	}, {
		name:     "dual-stack: a vanished family's slices are deleted, the other is left alone",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 3)))},
		existing: slices.Concat(existingChunks(v4, 3), existingChunks(v6, 2)),
		deletes:  1,
		want:     chunks(v4, 3),
	}, {
		name:     "a family switch creates and deletes: addressType is immutable",
		desired:  []Group{group(ipv6, port, endpoints(span(v6, 0, 2)))},
		existing: existingChunks(v4, 2),
		creates:  1, deletes: 1,
		want: chunks(v6, 2),
	}, {
		name:     "a port change in both families: each recycles its own slices",
		desired:  []Group{group(ipv4, port+1, endpoints(span(v4, 0, 3))), group(ipv6, port, endpoints(span(v6, 0, 2)))},
		existing: slices.Concat(existingChunks(v4, 3), []discoveryv1.EndpointSlice{slice("db-ipv6-7", ipv6, port+2, endpoints(span(v6, 0, 2)))}),
		updates:  2,
		want:     map[string][]string{"db-ipv4-0": span(v4, 0, 3), "db-ipv6-7": span(v6, 0, 2)},
	}, {
		name: "FQDN: names are ordered as text",
		max:  5,
		desired: []Group{{AddressType: discoveryv1.AddressTypeFQDN, Ports: ports(port),
			Endpoints: endpoints(span(fqdn, 0, 12))}},
		creates: 3,
		want: map[string][]string{
			"db-fqdn-0": {fqdn(0), fqdn(1), fqdn(10), fqdn(11), fqdn(2)},
			"db-fqdn-1": span(fqdn, 3, 8),
			"db-fqdn-2": span(fqdn, 8, 10),
		},
	}})
}

func TestComputeLimits(t *testing.T) {
	cases := []planCase{{
		name:    "max 1: one slice per endpoint",
		max:     1,
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 3)))},
		creates: 3,
		want:    chunks(v4, 1, 1, 1),
	}, {
		name:     "max 1: an added endpoint is one create",
		max:      1,
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 3)))},
		existing: existingChunks(v4, 1, 1),
		creates:  1,
		want:     chunks(v4, 1, 1, 1),
	}, {
		name:    "max 1000: a slice takes 1000 endpoints",
		max:     1000,
		desired: []Group{group(ipv6, port, endpoints(span(v6, 0, 1001)))},
		creates: 2,
		want:    chunks(v6, 1000, 1),
	}, {
		name:    "max above the API limit is capped at 1000",
		max:     5000,
		desired: []Group{group(ipv6, port, endpoints(span(v6, 0, 1001)))},
		creates: 2,
		want:    chunks(v6, 1000, 1),
	}, {
		name:    "max unset means 100",
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 101)))},
		creates: 2,
		want:    chunks(v4, 100, 1),
	}, {
		name:     "a lowered max splits a slice that is now too big",
		max:      50,
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 100)))},
		existing: existingChunks(v4, 100),
		creates:  1, updates: 1,
		want: chunks(v4, 50, 50),
	}}
	// Upstream's TestReconcileMaxEndpointsPerSlice: 250 endpoints, no slices.
	for _, c := range []struct {
		max   int
		sizes []int
	}{{50, repeat(5, 50)}, {80, []int{80, 80, 80, 10}}, {150, []int{150, 100}}, {250, []int{250}}, {500, []int{250}}} {
		cases = append(cases, planCase{
			name:    fmt.Sprintf("250 endpoints at max %d", c.max),
			max:     c.max,
			desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 250)))},
			creates: len(c.sizes),
			want:    chunks(v4, c.sizes...),
		})
	}
	runCases(t, cases)
}

func TestComputeNames(t *testing.T) {
	runCases(t, []planCase{{
		name:    "creates skip names of slices that are not ours",
		desired: []Group{group(ipv4, port, endpoints(span(v4, 0, 250)))},
		foreign: []string{"db-ipv4-0", "db-ipv4-2"},
		creates: 3,
		want:    map[string][]string{"db-ipv4-1": span(v4, 0, 100), "db-ipv4-3": span(v4, 100, 200), "db-ipv4-4": span(v4, 200, 250)},
	}, {
		name:     "creates take the smallest free number next to our own slices",
		desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 150)))},
		existing: []discoveryv1.EndpointSlice{slice("db-ipv4-1", ipv4, port, endpoints(span(v4, 0, 100)))},
		creates:  1,
		want:     map[string][]string{"db-ipv4-0": span(v4, 100, 150), "db-ipv4-1": span(v4, 0, 100)},
	}})
}

// TestComputeNamesAvoidOurSlices covers a TakenNames that lags behind the
// slices we own (two caches read at different times): our names are still
// avoided.
func TestComputeNamesAvoidOurSlices(t *testing.T) {
	plan := Compute(Input{
		Template: template(),
		Desired:  []Group{group(ipv4, port, endpoints(span(v4, 0, 150)))},
		Existing: existingChunks(v4, 100),
	})
	if len(plan.Create) != 1 || plan.Create[0].Name != "db-ipv4-1" {
		t.Errorf("creates %v, want one named db-ipv4-1", plan.Create)
	}
}

// TestComputeEndpointFieldChanges checks which differences in one endpoint
// are worth a write: everything consumers read, but not a nil condition
// where the explicit value means the same, nor the ignored deprecatedTopology.
func TestComputeEndpointFieldChanges(t *testing.T) {
	base := func() discoveryv1.Endpoint {
		ep := ready(v4(0))
		ep.Zone, ep.Hostname = ptr("zone-a"), ptr("db-0")
		return ep
	}
	for _, tc := range []struct {
		name    string
		change  func(*discoveryv1.Endpoint)
		updates int
	}{
		{"not ready", func(ep *discoveryv1.Endpoint) { ep.Conditions.Ready = ptr(false) }, 1},
		{"not serving", func(ep *discoveryv1.Endpoint) { ep.Conditions.Serving = ptr(false) }, 1},
		{"terminating", func(ep *discoveryv1.Endpoint) { ep.Conditions.Terminating = ptr(true) }, 1},
		{"zone", func(ep *discoveryv1.Endpoint) { ep.Zone = ptr("zone-b") }, 1},
		{"zone removed", func(ep *discoveryv1.Endpoint) { ep.Zone = nil }, 1},
		{"hostname", func(ep *discoveryv1.Endpoint) { ep.Hostname = ptr("db-1") }, 1},
		{"node name", func(ep *discoveryv1.Endpoint) { ep.NodeName = ptr("node-1") }, 1},
		{"hints", func(ep *discoveryv1.Endpoint) {
			ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}
		}, 1},
		{"second address", func(ep *discoveryv1.Endpoint) { ep.Addresses = append(ep.Addresses, v4(1)) }, 1},
		{"nil ready reads as true", func(ep *discoveryv1.Endpoint) { ep.Conditions.Ready = nil }, 0},
		{"nil serving reads as true", func(ep *discoveryv1.Endpoint) { ep.Conditions.Serving = nil }, 0},
		{"nil terminating reads as false", func(ep *discoveryv1.Endpoint) { ep.Conditions.Terminating = nil }, 0},
		{"deprecated topology is dropped by the API, so ignored", func(ep *discoveryv1.Endpoint) {
			ep.DeprecatedTopology = map[string]string{"zone": "zone-a"}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			desired := base()
			tc.change(&desired)
			in := Input{
				Template:   template(),
				Desired:    []Group{group(ipv4, port, []discoveryv1.Endpoint{desired})},
				Existing:   []discoveryv1.EndpointSlice{slice("db-ipv4-0", ipv4, port, []discoveryv1.Endpoint{base()})},
				TakenNames: sets.New("db-ipv4-0"),
			}
			plan := Compute(in)
			if len(plan.Create) != 0 || len(plan.Delete) != 0 || len(plan.Update) != tc.updates {
				t.Fatalf("creates, updates, deletes = %d, %d, %d, want 0, %d, 0", len(plan.Create), len(plan.Update), len(plan.Delete), tc.updates)
			}
			if tc.updates == 1 && !reflect.DeepEqual(plan.Update[0].Endpoints, []discoveryv1.Endpoint{desired}) {
				t.Errorf("updated endpoints = %+v, want %+v", plan.Update[0].Endpoints, desired)
			}
			checkInvariants(t, in, apply(t, in, plan))
		})
	}
}

// TestComputeIsDeterministic runs a busy input (port change with recycling,
// duplicates across slices, dual-stack, foreign names) twice and shuffled:
// the plans must be identical, so that two controller replicas or a retry
// after a failed write agree on names and placement.
func TestComputeIsDeterministic(t *testing.T) {
	in := Input{
		Template: template(),
		Desired: []Group{
			group(ipv4, port+1, endpoints(span(v4, 0, 260))),
			group(ipv6, port, endpoints(span(v6, 0, 130))),
		},
		Existing: slices.Concat(existingChunks(v4, 30, 30, 30, 30), []discoveryv1.EndpointSlice{
			slice("db-ipv6-3", ipv6, port, endpoints(span(v6, 0, 40))),
			slice("db-ipv6-1", ipv6, port, endpoints(span(v6, 20, 70))),
		}),
		MaxEndpointsPerSlice: 50,
	}
	in.TakenNames = names(in.Existing).Insert("db-ipv6-0", "db-ipv4-5")
	want := Compute(in)
	if again := Compute(in); !reflect.DeepEqual(again, want) {
		t.Fatalf("two runs over the same input differ")
	}

	rng := rand.New(rand.NewPCG(7, 7))
	for range 5 {
		shuffled := cloneInput(in)
		rng.Shuffle(len(shuffled.Existing), func(i, j int) {
			shuffled.Existing[i], shuffled.Existing[j] = shuffled.Existing[j], shuffled.Existing[i]
		})
		slices.Reverse(shuffled.Desired)
		for _, g := range shuffled.Desired {
			rng.Shuffle(len(g.Endpoints), func(i, j int) { g.Endpoints[i], g.Endpoints[j] = g.Endpoints[j], g.Endpoints[i] })
		}
		if got := Compute(shuffled); !reflect.DeepEqual(got, want) {
			t.Fatalf("the plan depends on input order")
		}
	}
	checkInvariants(t, in, apply(t, in, want))
}

func TestPlanEmpty(t *testing.T) {
	s := &discoveryv1.EndpointSlice{}
	for _, tc := range []struct {
		plan Plan
		want bool
	}{{Plan{}, true}, {Plan{Create: []*discoveryv1.EndpointSlice{s}}, false}, {Plan{Update: []*discoveryv1.EndpointSlice{s}}, false}, {Plan{Delete: []*discoveryv1.EndpointSlice{s}}, false}} {
		if got := tc.plan.Empty(); got != tc.want {
			t.Errorf("%+v.Empty() = %v, want %v", tc.plan, got, tc.want)
		}
	}
}

// TestPlanPlaces checks which plans put an endpoint where the cache did not
// have it, the ones the controller reads the live slices for.
func TestPlanPlaces(t *testing.T) {
	notReady := func(addr string) discoveryv1.Endpoint {
		ep := ready(addr)
		ep.Conditions.Ready = ptr(false)
		return ep
	}
	zoned := func(addr string) discoveryv1.Endpoint {
		ep := ready(addr)
		ep.Zone = ptr("zone-b")
		return ep
	}
	existing := []discoveryv1.EndpointSlice{
		slice("db-ipv4-0", ipv4, port, endpoints(span(v4, 0, 3))),
		slice("db-ipv4-1", ipv4, port, endpoints(span(v4, 3, 6))),
	}
	for _, tc := range []struct {
		name    string
		desired []discoveryv1.Endpoint
		max     int
		want    bool
	}{
		{"nothing changes", endpoints(span(v4, 0, 6)), 3, false},
		{"health flips in place", []discoveryv1.Endpoint{notReady(v4(0)), ready(v4(1)), ready(v4(2)), ready(v4(3)), notReady(v4(4)), ready(v4(5))}, 3, false},
		{"zone moves in place", []discoveryv1.Endpoint{zoned(v4(0)), ready(v4(1)), ready(v4(2)), ready(v4(3)), ready(v4(4)), zoned(v4(5))}, 3, false},
		{"endpoints removed", endpoints(span(v4, 0, 2), span(v4, 3, 6)), 3, false},
		{"an endpoint added to a slice with room", endpoints(span(v4, 0, 7)), 4, true},
		{"an endpoint added that needs a new slice", endpoints(span(v4, 0, 7)), 3, true},
		{"an endpoint replaced", endpoints(span(v4, 0, 5), span(v4, 6, 7)), 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{
				Template:             template(),
				Desired:              []Group{group(ipv4, port, tc.desired)},
				Existing:             existing,
				TakenNames:           names(existing),
				MaxEndpointsPerSlice: tc.max,
			}
			plan := Compute(in)
			if got := plan.Places(existing); got != tc.want {
				t.Errorf("Places = %v, want %v (creates %d, updates %d, deletes %d)", got, tc.want, len(plan.Create), len(plan.Update), len(plan.Delete))
			}
			checkInvariants(t, in, apply(t, in, plan))
		})
	}
}

// TestComputeAnnotate: annotations that depend on a slice's endpoints are
// written with the endpoint change that calls for them, never on their
// own, and a slice that carries them already is not written again.
func TestComputeAnnotate(t *testing.T) {
	tpl := template()
	tpl.Annotate = func(eps []discoveryv1.Endpoint) map[string]string {
		var term []string
		for _, ep := range eps {
			if deref(ep.Conditions.Terminating, false) {
				term = append(term, ep.Addresses[0])
			}
		}
		if len(term) == 0 {
			return nil
		}
		return map[string]string{"test/terminating": strings.Join(term, ",")}
	}
	steady := Input{Template: tpl, MaxEndpointsPerSlice: 10,
		Desired: []Group{group(discoveryv1.AddressTypeIPv4, 5432, endpoints(span(v4, 0, 3)))}}
	first := Compute(steady)
	steady.Existing = apply(t, steady, first)
	if p := Compute(steady); !p.Empty() {
		t.Fatalf("steady state plans writes: %+v", p)
	}

	drain := steady
	drain.Desired = []Group{group(discoveryv1.AddressTypeIPv4, 5432, []discoveryv1.Endpoint{ready(v4(0)), draining(v4(1)), ready(v4(2))})}
	p := Compute(drain)
	if len(p.Update) != 1 || p.Update[0].Annotations["test/terminating"] != v4(1) {
		t.Fatalf("drain start: want one update annotated %s, got %+v", v4(1), p)
	}
	drain.Existing = apply(t, drain, p)
	if p := Compute(drain); !p.Empty() {
		t.Errorf("annotated slice written again: %+v", p)
	}
}
