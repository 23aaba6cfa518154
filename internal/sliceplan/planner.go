// Package sliceplan plans the EndpointSlice writes for one Service: it
// compares the endpoints we want with the slices we already own and returns
// the fewest creates, updates and deletes that make them match.
//
// The planner is pure (no client, no clock, no randomness) so that the same
// input always yields the same writes, a resync with nothing new yields no
// write at all, and the whole algorithm can be checked with table tests.
// It follows the three steps of the upstream EndpointSlice reconciler
// (k8s.io/endpointslice): keep or fix endpoints in place, fill the slices that
// are written anyway, then put what is left into one untouched slice or into
// new ones; and, like upstream, it turns a delete plus a create into one update.
package sliceplan

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

const (
	// defaultMaxEndpointsPerSlice applies when the caller leaves the limit
	// unset; it is the Kubernetes default.
	defaultMaxEndpointsPerSlice = 100
	// apiMaxEndpointsPerSlice is the most endpoints the API server accepts in
	// one slice: a larger limit would only produce rejected writes.
	apiMaxEndpointsPerSlice = 1000
)

// Group is a set of desired endpoints that share an address type and a port set.
type Group struct {
	// AddressType is IPv4, IPv6 or FQDN: a slice holds one type only, for good.
	AddressType discoveryv1.AddressType
	// Ports are the exact ports every slice of this group carries.
	Ports []discoveryv1.EndpointPort
	// Endpoints each carry exactly one address; an endpoint's identity is the
	// group's AddressType plus Addresses[0], compared as written (callers
	// canonicalise addresses first). Endpoints without an address are
	// ignored, and of two endpoints with the same identity the first wins.
	Endpoints []discoveryv1.Endpoint
}

// Template is what every slice we own carries. Slices are compared with it
// on every run, so a label, annotation or owner change (or someone else's
// edit) is written back even when no endpoint moved.
type Template struct {
	// Namespace is the Service's: slices live next to it.
	Namespace string
	// ServiceName names new slices "<ServiceName>-<ipv4|ipv6|fqdn>-<k>".
	ServiceName string
	// Labels is the complete label set of our slices (service-name, managed-by, ...).
	Labels map[string]string
	// Annotations is the complete annotation set; nil means none.
	Annotations map[string]string
	// Owner is the Service; it must be the only ownerReference, so that the
	// slices are garbage collected with it.
	Owner metav1.OwnerReference
	// Annotate, when set, gives the annotations a slice carries because of
	// the endpoints it holds (when each drain started), on top of
	// Annotations. It must be a pure function of the endpoints.
	Annotate func(eps []discoveryv1.Endpoint) map[string]string
}

// metaFor is the complete annotation set of a slice holding eps: the
// template's, those Annotate gives for eps, and the volatile mark of a
// volatile slice.
func (t Template) metaFor(eps []discoveryv1.Endpoint, volatile bool) map[string]string {
	var extra map[string]string
	if t.Annotate != nil {
		extra = t.Annotate(eps)
	}
	if len(extra) == 0 && !volatile {
		return maps.Clone(t.Annotations)
	}
	out := maps.Clone(t.Annotations)
	if out == nil {
		out = make(map[string]string, len(extra)+1)
	}
	maps.Copy(out, extra)
	if volatile {
		out[VolatileAnnotation] = VolatileValue
	}
	return out
}

// Input is everything one planning run looks at.
type Input struct {
	// Template is the metadata every slice of ours must carry.
	Template Template
	// Desired holds the groups to publish. Groups with the same address type
	// and port set are merged; a group without endpoints publishes nothing,
	// so its slices are deleted (there is no placeholder slice).
	Desired []Group
	// Existing holds only the slices we manage, as read from the cache.
	Existing []discoveryv1.EndpointSlice
	// TakenNames holds the names of all slices seen in the namespace, ours
	// and others', so that a create never collides with one of them.
	TakenNames sets.Set[string]
	// MaxEndpointsPerSlice is 1..1000; 0 means the default of 100, and larger
	// values are capped at the API server's limit of 1000.
	MaxEndpointsPerSlice int
	// MaxSlices bounds the slices of the Service (0: no bound). Where the
	// endpoints would need more at MaxEndpointsPerSlice, slices hold more,
	// up to 1000; only what does not fit even then is left out (see
	// size.go).
	MaxSlices int
	// Volatile holds the addresses that changed often lately (see
	// Churn); nil turns churn-aware placement off. The planner gathers
	// them in small slices of their own, marked VolatileAnnotation, so
	// that their flips rewrite a few endpoints instead of full slices
	// (see churn.go).
	Volatile sets.Set[string]
}

// Plan is the set of writes that brings the slices to the desired state.
// Its objects are fresh copies: the caller may change them freely. Applying
// creates and updates before deletes keeps every endpoint published while
// the plan is carried out.
type Plan struct {
	// Create holds new slices with Name set (not GenerateName), so that the
	// names are known before the API server answers.
	Create []*discoveryv1.EndpointSlice
	// Update holds changed slices that keep the existing Name, UID and
	// ResourceVersion, so that a write against a stale cache fails with a
	// conflict instead of overwriting someone else's change.
	Update []*discoveryv1.EndpointSlice
	// Delete holds slices as read; Name, UID and ResourceVersion serve as
	// delete preconditions.
	Delete []*discoveryv1.EndpointSlice
	// Size is the most endpoints a slice holds under the plan: the limit
	// asked for, or more where MaxSlices needs it.
	Size int
	// LeftOut holds the desired endpoints no slice holds, by group,
	// because the groups need more than MaxSlices slices even at 1000
	// endpoints a slice.
	LeftOut []Group
}

// Empty reports whether the plan writes nothing, which is the steady state.
func (p Plan) Empty() bool {
	return len(p.Create) == 0 && len(p.Update) == 0 && len(p.Delete) == 0
}

// Places reports whether the plan puts an endpoint into a slice that did
// not hold it in existing (the slices the plan was computed from): any
// create, or an update that adds an address. Only such a write can give an
// endpoint a second copy when a slice existing misses already holds it; an
// update that changes endpoints in place (health, zone) cannot, and its
// resourceVersion precondition refuses it if the slice itself moved on.
func (p Plan) Places(existing []discoveryv1.EndpointSlice) bool {
	if len(p.Create) > 0 {
		return true
	}
	held := map[string]map[string]bool{}
	for _, s := range existing {
		addrs := map[string]bool{}
		for i := range s.Endpoints {
			addrs[firstAddress(&s.Endpoints[i])] = true
		}
		held[s.Name] = addrs
	}
	for _, s := range p.Update {
		for i := range s.Endpoints {
			if !held[s.Name][firstAddress(&s.Endpoints[i])] {
				return true
			}
		}
	}
	return false
}

// Compute returns the fewest writes that make the slices we own publish
// exactly the desired endpoints. It never changes its input, and the same
// input, in any order, always yields the same plan.
func Compute(in Input) Plan {
	desired := desiredGroups(in.Desired)
	existing := map[string][]*discoveryv1.EndpointSlice{}
	for i := range in.Existing {
		s := &in.Existing[i]
		key := GroupKey(s.AddressType, s.Ports)
		existing[key] = append(existing[key], s)
	}
	b := in.bound(desired, existing)

	plan := Plan{Size: b.size, LeftOut: b.leftOut}
	for _, key := range sets.List(sets.KeySet(desired).Union(sets.KeySet(existing))) {
		g, olds := desired[key], existing[key]
		slices.SortFunc(olds, byName)
		if g == nil {
			// Nobody wants this address type and port set any more.
			for _, old := range olds {
				plan.Delete = append(plan.Delete, old.DeepCopy())
			}
			continue
		}
		for _, d := range planGroup(in.Template, g, olds, b.size, b.budgets[key], in.Volatile) {
			switch {
			case d.old == nil:
				plan.Create = append(plan.Create, d.build(in.Template, g))
			case len(d.eps) == 0:
				plan.Delete = append(plan.Delete, d.old.DeepCopy())
			case d.dirty:
				plan.Update = append(plan.Update, d.build(in.Template, g))
			}
		}
	}

	slices.SortFunc(plan.Delete, byName)
	plan.recycle(in.Template)
	in.nameCreates(plan.Create)
	slices.SortFunc(plan.Create, byName)
	slices.SortFunc(plan.Update, byName)
	return plan
}

// desiredGroups merges the groups of the same address type and port set,
// each address once (the first wins), without endpoints that have none.
func desiredGroups(groups []Group) map[string]*Group {
	desired := map[string]*Group{}
	seen := sets.New[string]()
	for _, g := range groups {
		key := GroupKey(g.AddressType, g.Ports)
		for _, ep := range g.Endpoints {
			addr := firstAddress(&ep)
			if addr == "" || seen.Has(key+" "+addr) {
				continue
			}
			seen.Insert(key + " " + addr)
			if desired[key] == nil {
				desired[key] = &Group{AddressType: g.AddressType, Ports: g.Ports}
			}
			desired[key].Endpoints = append(desired[key].Endpoints, ep)
		}
	}
	return desired
}

// maxPerSlice is the endpoint limit of one slice asked for.
func (in Input) maxPerSlice() int {
	if in.MaxEndpointsPerSlice < 1 {
		return defaultMaxEndpointsPerSlice
	}
	return min(in.MaxEndpointsPerSlice, apiMaxEndpointsPerSlice)
}

// draft is one slice of a group while it is being planned: an existing slice
// (old) or a slice to create (old == nil), with the endpoints it will hold.
// Endpoints stay pointers into the input until build copies them, so that
// the common case, an unchanged slice, costs no copy.
type draft struct {
	old   *discoveryv1.EndpointSlice
	eps   []*discoveryv1.Endpoint
	dirty bool // the slice is written (created, updated or deleted) anyway
	// retired slices gave their endpoints up, to bring the group within
	// its budget of slices or because a volatile slice no longer pays
	// (disband): they are deleted (or recycled), never refilled.
	retired bool
	// volatile slices hold the endpoints that change often, a few each,
	// and carry VolatileAnnotation; steps 2 and 3 put no other endpoint
	// into them while another slice can take it.
	volatile bool
	// churnOnly slices are written only because volatile endpoints in
	// them changed: gathering those endpoints saves such writes later.
	churnOnly bool
}

// planGroup runs the three steps for one group against the slices of ours
// with the same address type and port set (sorted by name), and returns the
// drafts: existing slices in name order, then the slices to create. A
// budget above zero is the most slices the group may end with. Between
// steps 1 and 2, the volatile endpoints gather in volatile slices (gather).
func planGroup(t Template, g *Group, olds []*discoveryv1.EndpointSlice, limit, budget int, volatile sets.Set[string]) []*draft {
	want := make(map[string]*discoveryv1.Endpoint, len(g.Endpoints))
	for i := range g.Endpoints {
		ep := &g.Endpoints[i]
		if _, dup := want[firstAddress(ep)]; !dup {
			want[firstAddress(ep)] = ep
		}
	}
	drafts := keepInPlace(t, olds, want, limit, volatile)
	rest := slices.Collect(maps.Values(want))
	if budget > 0 {
		rest = retire(drafts, rest, budget)
	}
	rest = disband(drafts, rest, limit)
	slices.SortFunc(rest, func(a, b *discoveryv1.Endpoint) int { return CompareAddresses(firstAddress(a), firstAddress(b)) })
	full := func() bool { return budget > 0 && live(drafts) >= budget }
	if volatile.Len() > 0 {
		drafts, rest = gather(drafts, rest, volatile, limit, budget)
	}

	// Step 2: fill the slices written anyway, fullest first, so that the
	// additions cost no extra write and the slices end up packed; an empty
	// one only while the budget allows another slice.
	var changing []*draft
	for _, d := range drafts {
		if d.dirty && !d.retired && !d.volatile {
			changing = append(changing, d)
		}
	}
	slices.SortStableFunc(changing, func(a, b *draft) int { return cmp.Compare(len(b.eps), len(a.eps)) })
	for _, d := range changing {
		if len(d.eps) > 0 || !full() {
			rest = d.fill(rest, limit)
		}
	}

	// Step 3: one untouched slice that can take everything left costs one
	// update; otherwise new slices, filled to the limit, cost one create each
	// instead of several updates; past the budget, the slices with the most
	// room take the rest instead.
	for len(rest) > 0 {
		d := fullestFit(drafts, len(rest), limit)
		if d == nil && full() {
			d = roomiest(drafts, limit)
		}
		if d == nil {
			d = &draft{}
			drafts = append(drafts, d)
		}
		d.dirty = true
		rest = d.fill(rest, limit)
	}
	return drafts
}

// keepInPlace is step 1: keep the desired endpoints (want) where they are,
// replacing those that changed; drop the others. Deleting an endpoint from
// want once it is kept means a second slice holding it (stale cache, two
// writers) drops it.
func keepInPlace(t Template, olds []*discoveryv1.EndpointSlice, want map[string]*discoveryv1.Endpoint, limit int, volatile sets.Set[string]) []*draft {
	drafts := make([]*draft, 0, len(olds))
	for _, old := range olds {
		v := isVolatile(old)
		d := &draft{old: old, volatile: v, dirty: !sameMeta(old, t, v)}
		// stableChange says the slice is written for something other than
		// a volatile endpoint's change (see gather).
		stableChange := d.dirty
		for i := range old.Endpoints {
			have := &old.Endpoints[i]
			ep, ok := want[firstAddress(have)]
			if !ok || len(d.eps) == limit {
				d.dirty = true
				stableChange = stableChange || ok || !volatile.Has(firstAddress(have))
				continue
			}
			delete(want, firstAddress(have))
			if sameEndpoint(ep, have) {
				ep = have
			} else {
				d.dirty = true
				stableChange = stableChange || !volatile.Has(firstAddress(have))
			}
			d.eps = append(d.eps, ep)
		}
		// A slice left empty is written either way (deleted or refilled).
		d.dirty = d.dirty || len(d.eps) == 0
		d.churnOnly = d.dirty && !stableChange
		drafts = append(drafts, d)
	}
	return drafts
}

// fill moves endpoints from rest into the draft up to the limit and returns
// what did not fit.
func (d *draft) fill(rest []*discoveryv1.Endpoint, limit int) []*discoveryv1.Endpoint {
	n := min(limit-len(d.eps), len(rest))
	d.eps = append(d.eps, rest[:n]...)
	return rest[n:]
}

// fullestFit returns the unchanged slice that can take all n endpoints and
// ends up fullest, the first by name on a tie, or nil if none can.
func fullestFit(drafts []*draft, n, limit int) *draft {
	var best *draft
	for _, d := range drafts {
		if !d.dirty && !d.volatile && len(d.eps)+n <= limit && (best == nil || len(d.eps) > len(best.eps)) {
			best = d
		}
	}
	return best
}

// build turns the draft into the object to write: a copy of the existing
// slice (keeping its name, UID and resourceVersion) or a new one, carrying
// the template's metadata and deep copies of the endpoints.
func (d *draft) build(t Template, g *Group) *discoveryv1.EndpointSlice {
	var s *discoveryv1.EndpointSlice
	if d.old != nil {
		s = d.old.DeepCopy()
	} else {
		s = &discoveryv1.EndpointSlice{AddressType: g.AddressType, Ports: make([]discoveryv1.EndpointPort, len(g.Ports))}
		for i := range g.Ports {
			s.Ports[i] = *g.Ports[i].DeepCopy()
		}
	}
	s.Endpoints = make([]discoveryv1.Endpoint, len(d.eps))
	for i, ep := range d.eps {
		s.Endpoints[i] = *ep.DeepCopy()
	}
	applyTemplate(s, t, d.volatile)
	return s
}

// recycle turns each create into an update of a slice that would be deleted,
// one write instead of two, as upstream's finalize does. Only slices of the
// same address type pair up, because addressType is immutable; ports are not,
// so a port change rewrites slices in place instead of replacing them.
func (p *Plan) recycle(t Template) {
	var creates []*discoveryv1.EndpointSlice
	for _, c := range p.Create {
		i := slices.IndexFunc(p.Delete, func(d *discoveryv1.EndpointSlice) bool { return d.AddressType == c.AddressType })
		if i < 0 {
			creates = append(creates, c)
			continue
		}
		v := isVolatile(c)
		c.ObjectMeta = p.Delete[i].ObjectMeta
		applyTemplate(c, t, v)
		p.Update = append(p.Update, c)
		p.Delete = slices.Delete(p.Delete, i, i+1)
	}
	p.Create = creates
}

// nameCreates names new slices "<service>-<ipv4|ipv6|fqdn>-<k>" with the
// smallest free k. Fixed names (rather than generateName) keep the plan
// deterministic; avoiding every name seen, ours or not, avoids a create that
// is bound to fail with AlreadyExists.
func (in Input) nameCreates(creates []*discoveryv1.EndpointSlice) {
	taken := in.TakenNames.Clone()
	for i := range in.Existing {
		taken.Insert(in.Existing[i].Name)
	}
	for _, s := range creates {
		prefix := in.Template.ServiceName + "-" + strings.ToLower(string(s.AddressType)) + "-"
		k := 0
		for taken.Has(prefix + strconv.Itoa(k)) {
			k++
		}
		s.Name = prefix + strconv.Itoa(k)
		taken.Insert(s.Name)
	}
}

// applyTemplate sets the metadata every slice we write carries, for the
// endpoints it holds, and the volatile mark of a volatile slice.
func applyTemplate(s *discoveryv1.EndpointSlice, t Template, volatile bool) {
	s.Namespace = t.Namespace
	s.Labels = maps.Clone(t.Labels)
	s.Annotations = t.metaFor(s.Endpoints, volatile)
	s.OwnerReferences = []metav1.OwnerReference{*t.Owner.DeepCopy()}
}

// sameMeta reports whether the slice already carries the template's
// metadata for the endpoints it holds, volatile or not.
func sameMeta(s *discoveryv1.EndpointSlice, t Template, volatile bool) bool {
	return equality.Semantic.DeepEqual(s.Labels, t.Labels) &&
		equality.Semantic.DeepEqual(s.Annotations, t.metaFor(s.Endpoints, volatile)) &&
		equality.Semantic.DeepEqual(s.OwnerReferences, []metav1.OwnerReference{t.Owner})
}

// sameEndpoint reports whether writing want over have would change what
// consumers read. Conditions compare by meaning (nil ready and serving read
// as true, nil terminating as false): the API server keeps whichever spelling
// was written, and a spelling difference alone is not worth a write.
// deprecatedTopology is ignored because the v1 API drops it on write, so
// comparing it could ask for the same update forever. The rest compares
// semantically (nil and empty lists are equal), as the server round-trips it.
func sameEndpoint(want, have *discoveryv1.Endpoint) bool {
	a, b := *want, *have
	if deref(a.Conditions.Ready, true) != deref(b.Conditions.Ready, true) ||
		deref(a.Conditions.Serving, true) != deref(b.Conditions.Serving, true) ||
		deref(a.Conditions.Terminating, false) != deref(b.Conditions.Terminating, false) {
		return false
	}
	a.Conditions, b.Conditions = discoveryv1.EndpointConditions{}, discoveryv1.EndpointConditions{}
	a.DeprecatedTopology, b.DeprecatedTopology = nil, nil
	return equality.Semantic.DeepEqual(a, b)
}

// GroupKey identifies an address type and port set regardless of port order
// and of the defaults the API server fills in (name "" and protocol TCP), so
// that a slice read back from the server lands with the group that wrote it.
func GroupKey(addressType discoveryv1.AddressType, ports []discoveryv1.EndpointPort) string {
	keys := make([]string, len(ports))
	for i, p := range ports {
		keys[i] = fmt.Sprintf("%q/%q/%d/%q", deref(p.Name, ""), deref(p.Protocol, corev1.ProtocolTCP),
			deref(p.Port, -1), deref(p.AppProtocol, ""))
	}
	slices.Sort(keys) // port names are unique and lead the key: this sorts by name
	return string(addressType) + "|" + strings.Join(keys, ",")
}

// firstAddress is the endpoint's identity within its group; consumers read
// only the first address.
func firstAddress(ep *discoveryv1.Endpoint) string {
	if len(ep.Addresses) == 0 {
		return ""
	}
	return ep.Addresses[0]
}

// CompareAddresses orders IPs numerically, so that 192.0.2.9 comes before
// 192.0.2.10 and slices read naturally, and other addresses (FQDNs) after
// them by text.
func CompareAddresses(a, b string) int {
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	switch {
	case errX == nil && errY == nil:
		return cmp.Or(x.Compare(y), strings.Compare(a, b))
	case errX == nil:
		return -1
	case errY == nil:
		return 1
	}
	return strings.Compare(a, b)
}

func byName(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) }

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
