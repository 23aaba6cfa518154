package aws_test

import (
	"fmt"
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/test/awstest"
)

// vm is a running instance tagged app=web with private, public and IPv6
// addresses from the documentation ranges.
func vm(id, last string) awstest.EC2Instance {
	return awstest.EC2Instance{
		ID: id, State: "running", Zone: "eu-west-1b", Tags: map[string]string{"app": "web"},
		PrivateIP: "198.51.100." + last, PublicIP: "203.0.113." + last, IPv6: "2001:db8:1::" + last,
	}
}

func TestEC2States(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutEC2Instance(vm("i-0a", "10"))
	src := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}})
	p := e.s.EC2()
	for _, c := range []struct {
		state                string
		published            bool
		serving, terminating bool
	}{
		{"pending", true, false, false},
		{"running", true, true, false},
		{"stopping", true, true, true},
		{"stopped", false, false, false},
		{"pending", true, false, false},
		{"running", true, true, false},
		{"shutting-down", true, true, true},
		{"terminated", false, false, false},
	} {
		e.fake.SetEC2State("i-0a", c.state)
		e.expire()
		eps := resolve(t, p, src, v1alpha1.AddressTypeIPv4)
		switch {
		case !c.published && len(eps) != 0:
			t.Errorf("state %s: published %+v, want nothing", c.state, eps)
		case c.published && (len(eps) != 1 || eps[0].Serving != c.serving || eps[0].Terminating != c.terminating):
			t.Errorf("state %s: endpoints %+v, want serving=%v terminating=%v", c.state, eps, c.serving, c.terminating)
		}
	}
}

func TestEC2Addresses(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutEC2Instance(vm("i-0a", "10"))
	p := e.s.EC2()
	private := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}})
	eps := resolve(t, p, private, v1alpha1.AddressTypeIPv4)
	want := providers.Endpoint{Address: "198.51.100.10", Zone: "eu-west-1b", Hostname: "i-0a", Serving: true}
	if len(eps) != 1 || eps[0] != want {
		t.Fatalf("private: %+v, want [%+v]", eps, want)
	}
	wantAddresses(t, "private, dual-stack", resolve(t, p, private), "198.51.100.10", "2001:db8:1::10")
	public := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}, AddressKind: v1alpha1.AWSEC2AddressPublic})
	wantAddresses(t, "public", resolve(t, p, public, v1alpha1.AddressTypeIPv4), "203.0.113.10")
	wantAddresses(t, "IPv6 only", resolve(t, p, private, v1alpha1.AddressTypeIPv6), "2001:db8:1::10")
}

func TestEC2TagsAndPagination(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.SetPageLimit(5)
	for n := range 12 {
		i := vm(fmt.Sprintf("i-%02d", n), fmt.Sprint(n+1))
		if n%3 == 0 {
			i.Tags = map[string]string{"app": "db"}
		}
		e.fake.PutEC2Instance(i)
	}
	eps := resolve(t, e.s.EC2(), ec2Source(v1alpha1.AWSEC2Source{Tags: map[string]string{"app": "web"}}), v1alpha1.AddressTypeIPv4)
	if len(eps) != 8 {
		t.Fatalf("app=web found %d instances, want 8: %+v", len(eps), eps)
	}
	if got := e.fake.Calls(awstest.DescribeInstances); got != 3 {
		t.Errorf("DescribeInstances calls = %d, want 3 pages of at most 5", got)
	}
}

func TestEC2MissingInstances(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutEC2Instance(vm("i-0a", "10"))
	p := e.s.EC2()
	some := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a", "i-gone"}})
	wantAddresses(t, "one of two", resolve(t, p, some, v1alpha1.AddressTypeIPv4), "198.51.100.10")
	none := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-gone"}})
	wantErr(t, resolveErr(t, p, none), true, true, "BackendNotFound", "spec.sources[vms].awsEC2.instanceIDs", "i-gone")
}

func TestEC2ThrottlingAndAccessDenied(t *testing.T) {
	e := newEnv(t, nil)
	e.fake.PutEC2Instance(vm("i-0a", "10"))
	src := ec2Source(v1alpha1.AWSEC2Source{InstanceIDs: []string{"i-0a"}})
	p := e.s.EC2()
	e.fake.Fail(awstest.DescribeInstances, "RequestLimitExceeded", 2)
	wantAddresses(t, "after two throttles", resolve(t, p, src, v1alpha1.AddressTypeIPv4), "198.51.100.10")

	e.fake.Fail(awstest.DescribeInstances, "UnauthorizedOperation", -1)
	e.expire()
	wantErr(t, resolveErr(t, p, src), true, false, v1alpha1.ReasonAccessDenied,
		"spec.sources[vms].awsEC2", "UnauthorizedOperation", "ec2:DescribeInstances")
	if got := e.fake.Scopes()[region+"/ec2"]; got != 4 {
		t.Errorf("requests signed for %s/ec2: %d, want 4", region, got)
	}
}
