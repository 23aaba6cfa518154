package sliceplan

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// This file holds the fixtures and the checks shared by the tests: an
// in-memory stand-in for the API server that applies a Plan the way the
// server would, the invariants every applied plan must leave behind, and a
// seeded random walk over both.

const namespace = "payments"

func ptr[T any](v T) *T { return &v }

func template() Template {
	return Template{
		Namespace:   namespace,
		ServiceName: "db",
		Labels: map[string]string{
			discoveryv1.LabelServiceName: "db",
			discoveryv1.LabelManagedBy:   "externalbackend-controller.backendslice.io",
		},
		Owner: metav1.OwnerReference{
			APIVersion: "v1", Kind: "Service", Name: "db", UID: "svc-uid",
			Controller: ptr(true), BlockOwnerDeletion: ptr(true),
		},
	}
}

// v4 returns the i-th address of the documentation ranges (768 in all), in
// numeric order.
func v4(i int) string {
	return [...]string{"192.0.2.", "198.51.100.", "203.0.113."}[i/256] + strconv.Itoa(i%256)
}

// v6 returns the i-th address of 2001:db8::/32, in numeric order.
func v6(i int) string { return fmt.Sprintf("2001:db8::%x", i+1) }

func fqdn(i int) string { return fmt.Sprintf("host-%d.example.com", i) }

// span returns the addresses lo..hi-1.
func span(addr func(int) string, lo, hi int) []string {
	return where(addr, hi, func(i int) bool { return i >= lo })
}

// where returns the addresses i < n for which keep(i) holds.
func where(addr func(int) string, n int, keep func(int) bool) []string {
	var out []string
	for i := range n {
		if keep(i) {
			out = append(out, addr(i))
		}
	}
	return out
}

func ready(addr string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{addr},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
	}
}

func draining(addr string) discoveryv1.Endpoint {
	ep := ready(addr)
	ep.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
	return ep
}

func endpoints(addrs ...[]string) []discoveryv1.Endpoint {
	var out []discoveryv1.Endpoint
	for _, a := range slices.Concat(addrs...) {
		out = append(out, ready(a))
	}
	return out
}

func ports(port int32) []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{{Name: ptr("db"), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}}
}

func group(at discoveryv1.AddressType, port int32, eps []discoveryv1.Endpoint) Group {
	return Group{AddressType: at, Ports: ports(port), Endpoints: eps}
}

// slice returns a slice of ours as the cache would hold it.
func slice(name string, at discoveryv1.AddressType, port int32, eps []discoveryv1.Endpoint) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		AddressType: at,
		Ports:       ports(port),
		Endpoints:   eps,
	}
	applyTemplate(&s, template(), false)
	return s
}

func with(s discoveryv1.EndpointSlice, change func(*discoveryv1.EndpointSlice)) discoveryv1.EndpointSlice {
	change(&s)
	return s
}

func names(slices []discoveryv1.EndpointSlice) sets.Set[string] {
	out := sets.New[string]()
	for _, s := range slices {
		out.Insert(s.Name)
	}
	return out
}

// apply plays the plan against the existing slices as the API server would:
// updates and deletes must name the version that was read, creates must use a
// free name, addressType must not change, and ports come back defaulted.
func apply(t *testing.T, in Input, p Plan) []discoveryv1.EndpointSlice {
	t.Helper()
	store := map[string]discoveryv1.EndpointSlice{}
	for _, s := range in.Existing {
		store[s.Name] = *s.DeepCopy()
	}
	stored := func(s *discoveryv1.EndpointSlice, uid types.UID, version int) discoveryv1.EndpointSlice {
		out := *s.DeepCopy()
		out.UID, out.ResourceVersion = uid, strconv.Itoa(version)
		for i := range out.Ports {
			out.Ports[i].Name = ptr(deref(out.Ports[i].Name, ""))
			out.Ports[i].Protocol = ptr(deref(out.Ports[i].Protocol, corev1.ProtocolTCP))
		}
		return out
	}
	readAs := func(verb string, s *discoveryv1.EndpointSlice) discoveryv1.EndpointSlice {
		cur, ok := store[s.Name]
		if !ok || cur.UID != s.UID || cur.ResourceVersion != s.ResourceVersion {
			t.Errorf("%s %s (uid %q, rv %q): not the slice that was read", verb, s.Name, s.UID, s.ResourceVersion)
		}
		return cur
	}
	for _, s := range p.Delete {
		readAs("delete", s)
		delete(store, s.Name)
	}
	for _, s := range p.Update {
		cur := readAs("update", s)
		if cur.AddressType != s.AddressType {
			t.Errorf("update %s changes the immutable addressType %s to %s", s.Name, cur.AddressType, s.AddressType)
		}
		version, _ := strconv.Atoi(cur.ResourceVersion)
		store[s.Name] = stored(s, cur.UID, version+1)
	}
	existing := names(in.Existing)
	for _, s := range p.Create {
		if s.Name == "" || existing.Has(s.Name) || in.TakenNames.Has(s.Name) || s.UID != "" || s.ResourceVersion != "" {
			t.Errorf("create %q (uid %q, rv %q): name taken or identity preset", s.Name, s.UID, s.ResourceVersion)
		}
		if _, dup := store[s.Name]; dup {
			t.Errorf("create %s: created twice", s.Name)
		}
		store[s.Name] = stored(s, types.UID("uid-"+s.Name), 1)
	}
	return slices.SortedFunc(maps.Values(store), func(a, b discoveryv1.EndpointSlice) int { return byName(&a, &b) })
}

// checkInvariants checks the slices left by applying a plan for in: every
// desired endpoint exactly once and up to date, nothing else, no slice empty
// or over the limit, one address family per slice, the template's metadata,
// and a second run over the result writes nothing.
func checkInvariants(t *testing.T, in Input, got []discoveryv1.EndpointSlice) {
	t.Helper()
	ref := Compute(in)
	leftOut := sets.New[string]()
	for _, g := range ref.LeftOut {
		for i := range g.Endpoints {
			leftOut.Insert(GroupKey(g.AddressType, g.Ports) + " " + firstAddress(&g.Endpoints[i]))
		}
	}
	if in.MaxSlices > 0 && len(got) > in.MaxSlices {
		t.Errorf("%d slices, more than the bound of %d", len(got), in.MaxSlices)
	}
	if ref.Size < in.maxPerSlice() || ref.Size > apiMaxEndpointsPerSlice || (in.MaxSlices == 0 && ref.Size != in.maxPerSlice()) {
		t.Errorf("slice size %d, want %d, or up to 1000 under a bound on slices", ref.Size, in.maxPerSlice())
	}
	want := map[string]map[string]*discoveryv1.Endpoint{}
	for _, g := range in.Desired {
		key := GroupKey(g.AddressType, g.Ports)
		for i := range g.Endpoints {
			ep := &g.Endpoints[i]
			if firstAddress(ep) == "" || leftOut.Has(key+" "+firstAddress(ep)) {
				continue
			}
			if want[key] == nil {
				want[key] = map[string]*discoveryv1.Endpoint{}
			}
			if _, dup := want[key][firstAddress(ep)]; !dup {
				want[key][firstAddress(ep)] = ep
			}
		}
	}
	placed := map[string]string{}
	volatileSlices, preexisting := map[string]int{}, map[string]int{}
	for _, s := range got {
		if n := len(s.Endpoints); n == 0 || n > ref.Size {
			t.Errorf("slice %s holds %d endpoints, want 1..%d", s.Name, n, ref.Size)
		}
		annotations := maps.Clone(s.Annotations)
		if isVolatile(&s) {
			delete(annotations, VolatileAnnotation)
			volatileSlices[GroupKey(s.AddressType, s.Ports)]++
			if in.Volatile == nil {
				marked := slices.ContainsFunc(in.Existing, func(e discoveryv1.EndpointSlice) bool { return e.Name == s.Name && isVolatile(&e) })
				if !marked {
					t.Errorf("slice %s is marked volatile without churn-aware placement", s.Name)
				}
			}
		}
		if len(annotations) == 0 {
			annotations = nil
		}
		if !maps.Equal(s.Labels, in.Template.Labels) || !maps.Equal(annotations, in.Template.Annotations) ||
			!reflect.DeepEqual(s.OwnerReferences, []metav1.OwnerReference{in.Template.Owner}) {
			t.Errorf("slice %s metadata differs from the template: %v %v %v", s.Name, s.Labels, s.Annotations, s.OwnerReferences)
		}
		key := GroupKey(s.AddressType, s.Ports)
		for _, ep := range s.Endpoints {
			addr := firstAddress(&ep)
			if family(addr) != s.AddressType {
				t.Errorf("slice %s of type %s holds %q", s.Name, s.AddressType, addr)
			}
			switch d := want[key][addr]; {
			case d == nil:
				t.Errorf("slice %s publishes undesired %q", s.Name, addr)
			case !sameEndpoint(d, &ep):
				t.Errorf("slice %s publishes a stale %q: %+v, want %+v", s.Name, addr, ep, *d)
			}
			if other, dup := placed[key+" "+addr]; dup {
				t.Errorf("%q is in both %s and %s", addr, other, s.Name)
			}
			placed[key+" "+addr] = s.Name
		}
	}
	for key, eps := range want {
		for addr := range eps {
			if _, ok := placed[key+" "+addr]; !ok {
				t.Errorf("desired %q (%s) is in no slice", addr, key)
			}
		}
	}
	for i := range in.Existing {
		if e := &in.Existing[i]; isVolatile(e) {
			preexisting[GroupKey(e.AddressType, e.Ports)]++
		}
	}
	for key, n := range volatileSlices {
		if n > max(maxVolatileSlices, preexisting[key]) {
			t.Errorf("%d volatile slices of %s, more than the bound of %d", n, key, maxVolatileSlices)
		}
	}
	again := in
	again.Existing = got
	again.TakenNames = names(got).Union(in.TakenNames)
	if p := Compute(again); !p.Empty() {
		t.Errorf("not converged: a second run plans %d creates, %d updates, %d deletes", len(p.Create), len(p.Update), len(p.Delete))
	}
}

func family(addr string) discoveryv1.AddressType {
	ip, err := netip.ParseAddr(addr)
	switch {
	case err != nil:
		return discoveryv1.AddressTypeFQDN
	case ip.Is4():
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}

// cloneInput deep-copies an input, nil-ness included, to detect mutation.
func cloneInput(in Input) Input {
	out := in
	out.Template.Labels = maps.Clone(in.Template.Labels)
	out.Template.Annotations = maps.Clone(in.Template.Annotations)
	out.Template.Owner = *in.Template.Owner.DeepCopy()
	out.TakenNames = maps.Clone(in.TakenNames)
	out.Desired = slices.Clone(in.Desired)
	for i, g := range in.Desired {
		c := (&discoveryv1.EndpointSlice{Ports: g.Ports, Endpoints: g.Endpoints}).DeepCopy()
		out.Desired[i].Ports, out.Desired[i].Endpoints = c.Ports, c.Endpoints
	}
	out.Existing = slices.Clone(in.Existing)
	for i := range in.Existing {
		out.Existing[i] = *in.Existing[i].DeepCopy()
	}
	return out
}

// scribble overwrites everything reachable from the plan, so that a plan
// sharing memory with its input shows up as a mutated input.
func scribble(p Plan) {
	for _, s := range slices.Concat(p.Create, p.Update, p.Delete) {
		for _, m := range []map[string]string{s.Labels, s.Annotations} {
			for k := range m {
				m[k] = "scribbled"
			}
		}
		for i := range s.OwnerReferences {
			s.OwnerReferences[i].UID = "scribbled"
			*s.OwnerReferences[i].Controller = false
		}
		for i := range s.Ports {
			*s.Ports[i].Name, *s.Ports[i].Port = "scribbled", -1
		}
		for i := range s.Endpoints {
			ep := &s.Endpoints[i]
			ep.Addresses[0] = "scribbled"
			for _, b := range []*bool{ep.Conditions.Ready, ep.Conditions.Serving, ep.Conditions.Terminating} {
				if b != nil {
					*b = !*b
				}
			}
			for _, p := range []*string{ep.Zone, ep.Hostname, ep.NodeName} {
				if p != nil {
					*p = "scribbled"
				}
			}
			if ep.Hints != nil && len(ep.Hints.ForZones) > 0 {
				ep.Hints.ForZones[0].Name = "scribbled"
			}
		}
	}
}

// TestRandomizedChurn walks seeded random sequences of changes (endpoints
// coming, going and draining, families appearing and vanishing, port, label,
// limit and bound changes) with stale-cache duplicates and metadata drift
// injected on the way, and checks after every step that the plan leaves the
// invariants behind, is deterministic and leaves its input alone. Steps that
// only change endpoints in place must write exactly the slices holding them.
func TestRandomizedChurn(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			churn(t, seed, 50)
		})
	}
}

func churn(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0))
	tmpl, port, limit, bound := template(), int32(5432), 100, 0
	foreign := sets.New("db-ipv4-1", "db-ipv6-0", "db-fqdn-2")
	families := []struct {
		at   discoveryv1.AddressType
		addr func(int) string
		pool int
		eps  map[int]discoveryv1.Endpoint
	}{
		{discoveryv1.AddressTypeIPv4, v4, 768, map[int]discoveryv1.Endpoint{}},
		{discoveryv1.AddressTypeIPv6, v6, 2000, map[int]discoveryv1.Endpoint{}},
		{discoveryv1.AddressTypeFQDN, fqdn, 300, map[int]discoveryv1.Endpoint{}},
	}
	random := func(addr string) discoveryv1.Endpoint {
		ep := ready(addr)
		if rng.IntN(4) == 0 {
			ep = draining(addr)
		}
		ep.Zone = ptr([]string{"zone-a", "zone-b", "zone-c"}[rng.IntN(3)])
		return ep
	}
	var state []discoveryv1.EndpointSlice

	for step := range steps {
		f := &families[0] // IPv4 most of the time
		if rng.IntN(3) == 0 {
			f = &families[1+rng.IntN(2)]
		}
		have := slices.Sorted(maps.Keys(f.eps))
		var inPlace sets.Set[string] // addresses changed in place, if that is all this step does
		switch op := rng.IntN(9); {
		case op < 3: // endpoints come
			for range rng.IntN(150) + 1 {
				if i := rng.IntN(f.pool); f.eps[i].Addresses == nil {
					f.eps[i] = random(f.addr(i))
				}
			}
		case op < 5: // endpoints go, sometimes all of them
			n := rng.IntN(len(have)/2 + 1)
			if rng.IntN(6) == 0 {
				n = len(have)
			}
			for _, j := range rng.Perm(len(have))[:n] {
				delete(f.eps, have[j])
			}
		case op < 7: // endpoints change in place
			before := maps.Clone(f.eps)
			for range min(len(have), rng.IntN(12)+1) {
				i := have[rng.IntN(len(have))]
				f.eps[i] = random(f.addr(i))
			}
			inPlace = sets.New[string]()
			for i, ep := range f.eps {
				if old := before[i]; !sameEndpoint(&ep, &old) {
					inPlace.Insert(f.addr(i))
				}
			}
		case op == 7:
			port = 5432 + int32(rng.IntN(3))
			tmpl.Labels = maps.Clone(tmpl.Labels)
			tmpl.Labels["tier"] = []string{"gold", "silver"}[rng.IntN(2)]
		default:
			limit = []int{2, 10, 50, 100, 1000}[rng.IntN(5)]
			// 8 slices take every family's pool at 1000 a slice: the bound
			// raises the size, and never leaves an endpoint out.
			bound = []int{0, 8, 20, 60}[rng.IntN(4)]
		}

		var desired []Group
		for _, fam := range families {
			g := group(fam.at, port, nil)
			for _, i := range slices.Sorted(maps.Keys(fam.eps)) {
				g.Endpoints = append(g.Endpoints, fam.eps[i])
			}
			rng.Shuffle(len(g.Endpoints), func(i, j int) { g.Endpoints[i], g.Endpoints[j] = g.Endpoints[j], g.Endpoints[i] })
			desired = append(desired, g)
		}
		floor := sets.New[string]()
		for _, s := range state {
			for _, ep := range s.Endpoints {
				if inPlace.Has(firstAddress(&ep)) {
					floor.Insert(s.Name)
				}
			}
		}
		// A stale cache or a second writer: an endpoint in two of our slices,
		// or a slice whose metadata someone else changed.
		if len(state) > 1 && rng.IntN(5) == 0 {
			a, b := &state[rng.IntN(len(state))], &state[rng.IntN(len(state))]
			if a != b && a.AddressType == b.AddressType {
				b.Endpoints = append(b.Endpoints, a.Endpoints[rng.IntN(len(a.Endpoints))])
				inPlace = nil
			}
		}
		if len(state) > 0 && rng.IntN(10) == 0 {
			s := &state[rng.IntN(len(state))]
			s.OwnerReferences = []metav1.OwnerReference{{Kind: "Service", Name: "db", UID: "old-uid"}}
			inPlace = nil
		}

		in := Input{Template: tmpl, Desired: desired, Existing: state, TakenNames: names(state).Union(foreign), MaxEndpointsPerSlice: limit, MaxSlices: bound}
		before := cloneInput(in)
		plan := Compute(in)
		if !reflect.DeepEqual(plan, Compute(in)) {
			t.Fatalf("step %d: two runs over the same input differ", step)
		}
		if inPlace != nil && (len(plan.Create)+len(plan.Delete) != 0 || len(plan.Update) != floor.Len()) {
			t.Errorf("step %d: in-place change of %v in %v planned %d creates, %d updates, %d deletes; want exactly %d updates",
				step, sets.List(inPlace), sets.List(floor), len(plan.Create), len(plan.Update), len(plan.Delete), floor.Len())
		}
		state = apply(t, in, plan)
		checkInvariants(t, in, state)
		if !reflect.DeepEqual(in, before) {
			t.Errorf("step %d: Compute mutated its input", step)
		}
		if t.Failed() {
			t.Fatalf("seed %d failed at step %d", seed, step)
		}
	}
}

// writes counts the API writes of a plan.
func writes(p Plan) int { return len(p.Create) + len(p.Update) + len(p.Delete) }
