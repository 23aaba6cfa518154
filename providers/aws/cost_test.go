package aws_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
	"github.com/backendslice/backendslice/providers/providertest"
	"github.com/backendslice/backendslice/test/awstest"
)

// period is how long the cost tests run the backends, in simulated time.
const period = 10 * time.Minute

// simulate resolves each source as a backend of its own, each again when
// its Result.RefreshAfter says, as the controller requeues them, for
// period in steps of a second of e's clock; the backends arrive spread
// over the first refresh interval. request makes the request of the k-th
// source. It returns how many resolves it made; a failure or an empty
// answer fails the test.
func simulate(t *testing.T, e *env, sources []v1alpha1.Source, request func(k int, src v1alpha1.Source) providers.Request) int {
	t.Helper()
	const step = time.Second
	start := e.clock.Now()
	due := make([]time.Time, len(sources))
	for k := range due {
		due[k] = start.Add(time.Duration(k) * interval / time.Duration(len(sources)))
	}
	resolves := 0
	for now := start; now.Before(start.Add(period)); now = now.Add(step) {
		e.clock.SetTime(now)
		for k, src := range sources {
			if now.Before(due[k]) {
				continue
			}
			req := request(k, src)
			res, err := providerOf(e, src).Resolve(context.Background(), req)
			if err != nil {
				t.Fatalf("%s: %v", req.Backend, err)
			}
			if len(res.Endpoints) == 0 {
				t.Fatalf("%s: no endpoints", req.Backend)
			}
			resolves++
			due[k] = now.Add(res.RefreshAfter)
		}
	}
	return resolves
}

// TestCost500Backends counts the AWS calls 500 backends make over ten
// simulated minutes, each resolved again when its Result.RefreshAfter says,
// as the controller requeues them: 200 single RDS instances, the writer and
// the readers of 100 Aurora clusters, and 100 EC2 tag sources of two VMs.
// The region holds 400 DB instances (4 pages of 100), 100 clusters (1 page)
// and 200 VMs (1 page). The figure is logged; the test checks the bound the
// shared listings promise: pages × listings, whatever the backend count.
func TestCost500Backends(t *testing.T) {
	e := newEnv(t, nil)
	var sources []v1alpha1.Source
	for n := range 200 {
		id := fmt.Sprintf("single-%03d", n)
		e.fake.PutDBInstance(dbInstance(id, fmt.Sprintf("192.0.2.%d", n%250+1)))
		sources = append(sources, rdsSource(v1alpha1.AWSRDSSource{DBInstanceIdentifier: id}))
	}
	for n := range 100 {
		cluster := fmt.Sprintf("cluster-%03d", n)
		w, r := cluster+"-w", cluster+"-r"
		e.fake.PutDBInstance(dbInstance(w, fmt.Sprintf("198.51.100.%d", n+1)))
		e.fake.PutDBInstance(dbInstance(r, fmt.Sprintf("198.51.100.%d", n+101)))
		e.fake.PutDBCluster(awstest.DBCluster{Identifier: cluster, Status: "available",
			Members: []awstest.ClusterMember{{Instance: w, Writer: true}, {Instance: r}}})
		sources = append(sources,
			rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: cluster, Role: v1alpha1.AWSRDSRoleWriter}),
			rdsSource(v1alpha1.AWSRDSSource{DBClusterIdentifier: cluster, Role: v1alpha1.AWSRDSRoleReaders}))
	}
	for n := range 100 {
		app := fmt.Sprintf("app-%03d", n)
		for k := range 2 {
			e.fake.PutEC2Instance(awstest.EC2Instance{ID: fmt.Sprintf("i-%03d%d", n, k), State: "running",
				PrivateIP: fmt.Sprintf("203.0.113.%d", (2*n+k)%250+1), Zone: "eu-west-1a", Tags: map[string]string{"app": app}})
		}
		sources = append(sources, ec2Source(v1alpha1.AWSEC2Source{Tags: map[string]string{"app": app}}))
	}
	if len(sources) != 500 {
		t.Fatalf("%d sources, want 500", len(sources))
	}

	resolves := simulate(t, e, sources, func(k int, src v1alpha1.Source) providers.Request {
		req := providertest.NewRequest(src)
		req.Backend = fmt.Sprintf("backend-%03d", k)
		return req
	})
	calls := map[string]int{}
	for _, a := range []string{awstest.DescribeDBInstances, awstest.DescribeDBClusters, awstest.DescribeInstances} {
		calls[a] = e.fake.Calls(a)
	}
	total := e.fake.TotalCalls()
	t.Logf("500 backends, %v simulated, refresh interval %v: %d resolves, %d AWS calls (%v)", period, interval, resolves, total, calls)

	// Each listing lives at least 0.9 of the interval, so it is listed at
	// most once per 0.9 interval, plus the first listing.
	listings := int(math.Ceil(float64(period)/(0.9*float64(interval)))) + 1
	const pages = 4 + 1 + 1
	if total > listings*pages {
		t.Errorf("%d AWS calls, more than %d listings × %d pages", total, listings, pages)
	}
}
