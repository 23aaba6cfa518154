package aws

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// cacheState is how one status of a cache or of a part of it publishes
// the cache's nodes.
type cacheState int

// The cache states: a status that is not in cacheStates is not ready.
const (
	cacheNotReady cacheState = iota
	cacheServing
	cacheDraining
	cacheGone
)

// cacheStates is the table of ElastiCache's and MemoryDB's statuses: of a
// replication group and its shards, of a cache cluster (a Memcached
// cluster, or a group's member) and its nodes, of a serverless cache, and
// of a MemoryDB cluster, its shards and its nodes. A node is published as
// all the statuses above it and its own say together:
//
//	status                                   published as
//	available, modifying, updating,          serving (ready), while every
//	snapshotting                             status above it serves too
//	deleting; a node AWS lists for removal   draining (terminating; still
//	(CacheNodeIdsToRemove: a scale-in, or    serving unless another status
//	a node being replaced)                   says not ready)
//	creating, rebooting, rebooting cluster   not serving
//	nodes, failed, create-failed,
//	restore-failed, incompatible-network,
//	and any status not listed here
//	deleted                                  left out: what was published
//	                                         drains and leaves
//
// A node without an endpoint yet (being created) is left out, as an RDS
// instance is.
var cacheStates = map[string]cacheState{
	"available":               cacheServing,
	"modifying":               cacheServing,
	"updating":                cacheServing,
	"snapshotting":            cacheServing,
	"deleting":                cacheDraining,
	"deleted":                 cacheGone,
	"creating":                cacheNotReady,
	"rebooting":               cacheNotReady,
	"rebooting cluster nodes": cacheNotReady,
	"failed":                  cacheNotReady,
	"create-failed":           cacheNotReady,
	"restore-failed":          cacheNotReady,
	"incompatible-network":    cacheNotReady,
}

// cacheCondition is how a node is published whose cache, shard, cluster
// and own statuses are statuses ("" is a status AWS did not report, which
// says nothing) and which AWS is removing when removing is set.
func cacheCondition(statuses []string, removing bool) (serving, terminating, publish bool) {
	serving, terminating = true, removing
	for _, st := range statuses {
		if st == "" {
			continue
		}
		switch cacheStates[st] {
		case cacheGone:
			return false, false, false
		case cacheDraining:
			terminating = true
		case cacheNotReady:
			serving = false
		}
	}
	return serving, terminating, true
}

// cacheNode is one endpoint of a cache to publish.
type cacheNode struct {
	// hostname names the node on the slice (a DNS label, or "").
	hostname string
	// address is the node's endpoint name, port its port, zone its
	// availability zone.
	address, zone string
	port          int32
	// statuses are the cache's, its shard's, its cluster's and the node's;
	// removing says AWS lists the node for removal.
	statuses []string
	removing bool
}

// publishNodes publishes the nodes of a cache (what names it) as the
// table says, each at its own endpoint, resolved or as a name (see
// Session.publishName).
func (s *Session) publishNodes(ctx context.Context, field, what string, nodes []cacheNode, types []v1alpha1.AddressType) ([]providers.Endpoint, error) {
	eps := []providers.Endpoint{}
	for _, n := range nodes {
		serving, terminating, publish := cacheCondition(n.statuses, n.removing)
		if !publish || n.address == "" {
			continue
		}
		base := providers.Endpoint{Zone: n.zone, Hostname: n.hostname, Port: n.port, Serving: serving, Terminating: terminating}
		more, err := s.publishName(ctx, field, what, n.address, base, types)
		if err != nil {
			return nil, err
		}
		eps = append(eps, more...)
	}
	return eps, nil
}

// lookup is how a source finds the one cache it names in a listing.
type lookup[V any] struct {
	// field is the spec's field that names it, what says what it is
	// ("replication group") and name is its key in the listing.
	field, what, name string
	// list is the listing, listed from since on when since is not zero;
	// action is the IAM action that lists it.
	list   func(ctx context.Context, since time.Time) (map[string]V, error)
	action string
	// tags reads the cache's tags; only a target with a consent tag asks.
	tags func(context.Context, V) (map[string]string, error)
}

// find returns the cache l names. One that is missing from the listing
// is looked for in a listing that starts after it was missed before it is
// declared gone (BackendNotFound); with a consent tag, one that is
// missing, one whose tag does not list the namespace and one whose tags
// cannot be read (a missing permission, throttling: see tagReader) fail
// alike (see target.refused), so that a failing tag call does not tell a
// tenant that the cache exists. The cause of the last goes to the log.
func find[V any](ctx context.Context, s *Session, t target, l lookup[V]) (V, error) {
	var zero V
	m, err := l.list(ctx, time.Time{})
	if err == nil {
		m, err = relistIfMissing(ctx, s, m, hasKey[V](l.name), l.list)
	}
	if err != nil {
		return zero, classify(err, l.field, l.action, t)
	}
	v, ok := m[l.name]
	if t.consentTag != "" {
		if ok {
			tags, err := l.tags(ctx, v)
			if err != nil {
				logr.FromContextOrDiscard(ctx).Info("the consent tag of a cache could not be read: the source is told what a cache without consent is told",
					"field", l.field, "cache", l.name, "region", t.id.region, "error", err.Error())
				return zero, t.unconfirmed(err, l.field, l.what, l.name)
			}
			ok = t.consents(tags)
		}
		if !ok {
			return zero, t.refused(l.field, l.what, l.name)
		}
	}
	if !ok {
		return zero, providers.Gone(v1alpha1.ReasonBackendNotFound, fmt.Errorf("%s: %s %q not found in %s", l.field, l.what, l.name, t.id.region))
	}
	return v, nil
}

// tagsKey is the listing of the tags of the cache a source names (what
// and name tell it), which the source reads when its target has a consent
// tag: ElastiCache and MemoryDB list no tags with their caches, so each
// cache's are one more call per refresh interval, shared by every source
// that names it. Nil without a consent tag: no tag is read.
func tagsKey(t target, what, name string) []listingKey {
	if t.consentTag == "" {
		return nil
	}
	return []listingKey{{t.id, listTagsOf + what + " " + name}}
}

// tagReader reads the tags of the cache key (from tagsKey) names, through
// the listing of key, listing them with fetch (which asks AWS for the
// tags of an ARN) the first time; arn is the cache's ARN in a listing,
// field and action name the source's field and the IAM action in
// failures. While reading them again fails, the tags last read stand, as
// any last known answer does while its listing fails: a consenting
// cache stays published through a throttled or refused tag call. Tags
// never read fail (find tells that as a refusal).
func tagReader[V any](s *Session, t target, key []listingKey, field, action string, arn func(V) string,
	fetch func(ctx context.Context, c *clients, arn string) (map[string]string, error)) func(context.Context, V) (map[string]string, error) {
	return func(ctx context.Context, v V) (map[string]string, error) {
		a := arn(v)
		l := listingOf(s, key[0], (*shared).tagsSlot, func(ctx context.Context, c *clients) (map[string]string, error) {
			return fetch(ctx, c, a)
		})
		tags, err := l.get(ctx, time.Time{})
		if err != nil {
			if last, ok := l.lastGood(); ok {
				return last, nil
			}
			return nil, classify(err, field, action, t)
		}
		return tags, nil
	}
}
