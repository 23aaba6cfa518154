package consul

import (
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

func TestNextIndex(t *testing.T) {
	cases := []struct {
		name            string
		prev, got, want uint64
	}{
		{name: "first answer", prev: 0, got: 42, want: 42},
		{name: "moved on", prev: 42, got: 57, want: 57},
		{name: "unchanged (timeout)", prev: 42, got: 42, want: 42},
		{name: "went backwards: reset", prev: 42, got: 7, want: 0},
		{name: "zero after zero: never block on 0", prev: 0, got: 0, want: 1},
		{name: "zero after an index: backwards first", prev: 42, got: 0, want: 0},
		{name: "one stays", prev: 1, got: 1, want: 1},
	}
	for _, c := range cases {
		if got := nextIndex(c.prev, c.got); got != c.want {
			t.Errorf("%s: nextIndex(%d, %d) = %d, want %d", c.name, c.prev, c.got, got, c.want)
		}
	}
}

func TestKeyOf(t *testing.T) {
	// own is the key of a source through the controller's own connection.
	own := func(s *v1alpha1.ConsulSource) watchKey {
		k, _ := keyOf(connID{}, s.Datacenter, s)
		return k
	}
	src := &v1alpha1.ConsulSource{Service: "web", Tags: []string{"b", "a", "b"}, NodeMeta: map[string]string{"rack": "r1", "dc": "x"}}
	key, _ := keyOf(connID{}, "", src)
	if src.Tags[0] != "b" || len(src.Tags) != 3 {
		t.Errorf("keyOf changed the source's tags: %v", src.Tags)
	}
	// Tags, node meta and how instances are mapped are per source, not per
	// watch: one watch serves every filter of a service.
	same := []*v1alpha1.ConsulSource{
		{Service: "web", Tags: []string{"a", "b"}, NodeMeta: map[string]string{"dc": "x", "rack": "r1"}},
		{Service: "web", Tags: []string{"b", "a"}, NodeMeta: map[string]string{"dc": "x", "rack": "r1"}, OnlyPassing: true, ZoneMetaKey: "zone"},
		{Service: "web", Tags: []string{"a"}, NodeMeta: src.NodeMeta},
		{Service: "web", Tags: []string{"a,b"}, NodeMeta: src.NodeMeta},
		{Service: "web", Tags: src.Tags, NodeMeta: map[string]string{"rack": "r1"}},
		{Service: "web", Tags: src.Tags, NodeMeta: map[string]string{"rack": "r1", "dc": "y"}},
		{Service: "web"},
	}
	for _, s := range same {
		if k := own(s); k != key {
			t.Errorf("keyOf(%+v) = %+v, want the same key as %+v", s, k, src)
		}
	}
	other := []*v1alpha1.ConsulSource{
		{Service: "api", Tags: src.Tags, NodeMeta: src.NodeMeta},
		{Service: "web", Tags: src.Tags, NodeMeta: src.NodeMeta, Datacenter: "dc2"},
		{Service: "web", Tags: src.Tags, NodeMeta: src.NodeMeta, Namespace: "ns"},
		{Service: "web", Tags: src.Tags, NodeMeta: src.NodeMeta, Partition: "p"},
	}
	for _, s := range other {
		if k := own(s); k == key {
			t.Errorf("keyOf(%+v) is the key of %+v; want another", s, src)
		}
	}
	// The same source through BackendProviders: never the key of another.
	through := []connID{{"east", "v1"}, {"east", "v2"}, {"west", "v1"}}
	seen := map[watchKey]connID{key: {}}
	for _, c := range through {
		k, _ := keyOf(c, "", src)
		if other, dup := seen[k]; dup {
			t.Errorf("the source through %+v has the key it has through %+v", c, other)
		}
		seen[k] = c
	}
	if _, q := keyOf(connID{"east", "v1"}, "dc-east", src); q.opts.Datacenter != "dc-east" {
		t.Errorf("query datacenter = %q, want the one given, dc-east", q.opts.Datacenter)
	}
}

func TestSelection(t *testing.T) {
	in := instance{Node: "n1", Address: "192.0.2.1", Tags: []string{"primary", "v2"}, NodeMeta: map[string]string{"rack": "r1", "zone": "a"}}
	cases := []struct {
		name string
		sel  selection
		want bool
	}{
		{name: "no filter", want: true},
		{name: "one tag it has", sel: selection{tags: []string{"v2"}}, want: true},
		{name: "every tag it has", sel: selection{tags: []string{"v2", "primary"}}, want: true},
		{name: "a tag it lacks", sel: selection{tags: []string{"primary", "replica"}}},
		{name: "tags are not split on commas", sel: selection{tags: []string{"primary,v2"}}},
		{name: "node meta it has", sel: selection{nodeMeta: map[string]string{"rack": "r1"}}, want: true},
		{name: "node meta of another value", sel: selection{nodeMeta: map[string]string{"rack": "r2"}}},
		{name: "node meta key it lacks, empty value", sel: selection{nodeMeta: map[string]string{"dc": ""}}},
		{name: "tags and node meta", sel: selection{tags: []string{"v2"}, nodeMeta: map[string]string{"zone": "a", "rack": "r1"}}, want: true},
	}
	for _, c := range cases {
		if got := c.sel.selects(in); got != c.want {
			t.Errorf("%s: selects = %v, want %v", c.name, got, c.want)
		}
		if got := len(c.sel.filter([]instance{in})) == 1; got != c.want {
			t.Errorf("%s: filter kept it = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestSafeService(t *testing.T) {
	for _, name := range []string{"web", "db-primary", "web.v2", "api_gateway", "Payments"} {
		if !safeService(name) {
			t.Errorf("safeService(%q) = false, want true", name)
		}
	}
	for _, name := range []string{"../agent/self", "a/b", "..", "db..x", "db?dc=x", "db#x", "db%2F", "db x", "db\tx", "db\n", "db\x00", "db\u200b"} {
		if safeService(name) {
			t.Errorf("safeService(%q) = true, want false", name)
		}
	}
}
