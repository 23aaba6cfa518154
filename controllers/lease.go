package controllers

import (
	"cmp"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// The lease's own request budget. A leader renews with one Lease update a
// retry period, two (a get, then the update) after a conflict or a failed
// attempt; a standby reads the Lease once a period. The lease's client may
// send twice that, in bursts of leaseBurst: a renewal never waits for a
// token unless the elector itself runs away.
const (
	leaseRequestsPerRetry = 2
	leaseHeadroom         = 2
	leaseBurst            = 10
)

// leaseConfigFor is the lease's config of a manager of opts made from
// cfg; nil without leader election.
func leaseConfigFor(cfg *rest.Config, opts ManagerOptions) *rest.Config {
	if !opts.LeaderElection {
		return nil
	}
	return leaseConfig(cfg, cmp.Or(opts.Lease.RetryPeriod, DefaultRetryPeriod))
}

// leaseConfig is cfg for the leader election lease alone: a copy with a
// rate limiter of its own, sized by the retry period.
//
// Every client made from cfg shares cfg's limiter (the tenants' fair
// limiter, internal/fairshare), where requests that name no namespace
// (informers, Events, the lease) share one flow served in arrival order.
// A storm of Events from one namespace once queued the renewals there for
// 12 s, past the renew deadline: the leader lost its lease and exited,
// and every tenant's backends waited for a new leader, in a crash loop.
// The lease's requests are few and must not wait behind anyone's.
func leaseConfig(cfg *rest.Config, retry time.Duration) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS = float32(leaseRequestsPerRetry * leaseHeadroom / retry.Seconds())
	c.Burst = leaseBurst
	c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	return c
}
