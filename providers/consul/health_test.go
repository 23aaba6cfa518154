package consul

import (
	"reflect"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/backendslice/backendslice/providers"
)

// entry builds a health answer entry with the given check statuses by ID.
func entry(node, nodeAddr, svcAddr string, checks map[string]string) *api.ServiceEntry {
	e := &api.ServiceEntry{
		Node:    &api.Node{Node: node, Address: nodeAddr, Meta: map[string]string{"zone": "node-zone"}},
		Service: &api.AgentService{ID: "web-1", Service: "web", Address: svcAddr},
	}
	for id, status := range checks {
		e.Checks = append(e.Checks, &api.HealthCheck{CheckID: id, Status: status})
	}
	return e
}

func TestInstancesOf(t *testing.T) {
	cases := []struct {
		name   string
		entry  *api.ServiceEntry
		want   []instance
		wantNo bool
	}{
		{name: "no checks pass", entry: entry("n1", "192.0.2.1", "", nil),
			want: []instance{{Node: "n1", Address: "192.0.2.1", NodeMeta: map[string]string{"zone": "node-zone"}, Health: passing}}},
		{name: "service address wins", entry: entry("n1", "192.0.2.1", "198.51.100.1", map[string]string{"serfHealth": "passing"}),
			want: []instance{{Node: "n1", Address: "198.51.100.1", NodeMeta: map[string]string{"zone": "node-zone"}, Health: passing}}},
		{name: "worst check counts", entry: entry("n1", "192.0.2.1", "", map[string]string{"a": "passing", "b": "warning"}),
			want: []instance{{Node: "n1", Address: "192.0.2.1", NodeMeta: map[string]string{"zone": "node-zone"}, Health: warning}}},
		{name: "critical beats warning", entry: entry("n1", "192.0.2.1", "", map[string]string{"a": "critical", "b": "warning"}),
			want: []instance{{Node: "n1", Address: "192.0.2.1", NodeMeta: map[string]string{"zone": "node-zone"}, Health: critical}}},
		{name: "unknown status is critical", entry: entry("n1", "192.0.2.1", "", map[string]string{"a": "maybe"}),
			want: []instance{{Node: "n1", Address: "192.0.2.1", NodeMeta: map[string]string{"zone": "node-zone"}, Health: critical}}},
		{name: "node maintenance", entry: entry("n1", "192.0.2.1", "", map[string]string{api.NodeMaint: "critical", "a": "passing"}),
			want: []instance{{Node: "n1", Address: "192.0.2.1", NodeMeta: map[string]string{"zone": "node-zone"}, Health: passing, Maintenance: true}}},
		{name: "service maintenance keeps the other checks' health",
			entry: entry("n1", "192.0.2.1", "", map[string]string{api.ServiceMaintPrefix + "web-1": "critical", "a": "warning"}),
			want:  []instance{{Node: "n1", Address: "192.0.2.1", NodeMeta: map[string]string{"zone": "node-zone"}, Health: warning, Maintenance: true}}},
		{name: "no address at all", entry: entry("n1", "", "", nil), wantNo: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := instancesOf([]*api.ServiceEntry{c.entry})
			if c.wantNo {
				if len(got) != 0 {
					t.Fatalf("instancesOf = %+v, want none", got)
				}
				return
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("instancesOf =\n %+v\nwant\n %+v", got, c.want)
			}
		})
	}
}

func TestEndpointsOf(t *testing.T) {
	meta := func(zone string) map[string]string { return map[string]string{"zone": zone} }
	ins := []instance{
		{Node: "node-1", Address: "192.0.2.1", ServiceMeta: meta("svc-a"), NodeMeta: meta("node-a"), Health: passing},
		{Node: "node-2", Address: "192.0.2.2", NodeMeta: meta("node-b"), Health: warning},
		{Node: "Node_3", Address: "192.0.2.3", Health: critical},
		{Node: "node-4", Address: "192.0.2.4", Health: passing, Maintenance: true},
		{Node: "node-5", Address: "192.0.2.5", Health: critical, Maintenance: true},
	}
	cases := []struct {
		name        string
		onlyPassing bool
		zoneKey     string
		want        []providers.Endpoint
	}{
		{name: "default", zoneKey: "zone", want: []providers.Endpoint{
			{Address: "192.0.2.1", Zone: "svc-a", Hostname: "node-1", Serving: true},
			{Address: "192.0.2.2", Zone: "node-b", Hostname: "node-2", Serving: true},
			{Address: "192.0.2.3"},
			{Address: "192.0.2.4", Hostname: "node-4", Serving: true, Terminating: true},
			{Address: "192.0.2.5", Hostname: "node-5", Terminating: true},
		}},
		{name: "only passing, no zone key", onlyPassing: true, want: []providers.Endpoint{
			{Address: "192.0.2.1", Hostname: "node-1", Serving: true},
			{Address: "192.0.2.2", Hostname: "node-2"},
			{Address: "192.0.2.3"},
			{Address: "192.0.2.4", Hostname: "node-4", Serving: true, Terminating: true},
			{Address: "192.0.2.5", Hostname: "node-5", Terminating: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := endpointsOf(ins, c.onlyPassing, c.zoneKey)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("endpointsOf =\n %+v\nwant\n %+v", got, c.want)
			}
		})
	}
}

func TestEndpointsOfSharedAddress(t *testing.T) {
	// Two instances on one node without a service address share the node's
	// address: the one in the best state is published, whatever the order.
	down := instance{Node: "n", Address: "192.0.2.1", Health: critical}
	draining := instance{Node: "n", Address: "192.0.2.1", Health: passing, Maintenance: true}
	up := instance{Node: "n", Address: "192.0.2.1", Health: passing}
	want := providers.Endpoint{Address: "192.0.2.1", Hostname: "n", Serving: true}
	for _, order := range [][]instance{{down, draining, up}, {up, down, draining}, {draining, up, down}} {
		got := endpointsOf(order, false, "")
		if len(got) != 1 || got[0] != want {
			t.Errorf("endpointsOf(%+v) = %+v, want [%+v]", order, got, want)
		}
	}
	got := endpointsOf([]instance{down, draining}, false, "")
	if len(got) != 1 || !got[0].Serving || !got[0].Terminating {
		t.Errorf("a draining instance should win over a failing one: %+v", got)
	}
}
