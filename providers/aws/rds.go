package aws

import (
	"context"
	"fmt"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/rds"
	rdstypes "github.com/aws/aws-sdk-go-v2/service/rds/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// RDSProvider resolves awsRDS sources.
//
// Each instance is published at its own endpoint (never the cluster's DNS
// name, which lags a failover by the DNS TTL), with the instance's port and
// its availability zone. The endpoint name is resolved to the IPv4 and IPv6
// addresses the spec publishes (a dual-stack instance gives both), and is
// published itself when spec.addressTypes lists FQDN.
//
// Instance status to endpoint condition:
//
//	status                                          published as
//	available, backing-up, modifying,               serving (ready)
//	configuring-enhanced-monitoring,
//	configuring-iam-database-auth,
//	configuring-log-exports, converting-to-vpc,
//	resetting-master-credentials,
//	storage-optimization, storage-config-upgrade
//	deleting                                        draining (serving, terminating)
//	creating, rebooting, starting, stopping,        not serving
//	stopped, failed, storage-full, incompatible-*,
//	inaccessible-encryption-credentials*,
//	maintenance, upgrading, renaming, moving-to-vpc,
//	restore-error, insufficient-capacity, and any
//	status not listed here
//
// An instance without an endpoint yet (being created) is left out. Aurora
// roles come from the cluster's members: writer is the member with
// IsClusterWriter, readers the others, any all of them.
//
// Through a BackendProvider with a consent tag, an instance selected by
// tags is published only when its own tag lists the backend's namespace;
// a cluster's members are published when the cluster's tag does. An
// instance or cluster named by identifier that does not consent fails the
// source (AccessDenied) and what it published drains.
type RDSProvider struct{ member }

// servingStatuses are the statuses in which an instance takes connections.
var servingStatuses = map[string]bool{
	"available":                       true,
	"backing-up":                      true,
	"modifying":                       true,
	"configuring-enhanced-monitoring": true,
	"configuring-iam-database-auth":   true,
	"configuring-log-exports":         true,
	"converting-to-vpc":               true,
	"resetting-master-credentials":    true,
	"storage-optimization":            true,
	"storage-config-upgrade":          true,
}

// dbInstance is what the provider keeps of a DB instance.
type dbInstance struct {
	id, status, address, zone string
	port                      int32
	tags                      map[string]string
}

// dbCluster is what the provider keeps of an Aurora cluster.
type dbCluster struct {
	members []dbMember
	tags    map[string]string
}

// dbMember is one member of an Aurora cluster.
type dbMember struct {
	instance string
	writer   bool
}

// Resolve returns the endpoints of the instances the source selects.
func (p *RDSProvider) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	src := req.Source.AWSRDS
	field, t, err := p.open(req, src != nil, func() (string, string) { return string(src.Region), src.AssumeRoleARN })
	if err != nil {
		return providers.Result{}, err
	}
	id := t.id
	reads := []listingKey{{id, describeDBInstances}}
	if src.DBClusterIdentifier != "" {
		reads = append(reads, listingKey{id, describeDBClusters})
	}
	p.s.use(KindRDS, req, reads...)
	instances, err := p.instances(ctx, id, time.Time{})
	if err != nil {
		return providers.Result{}, classify(err, field, "rds:DescribeDBInstances", t)
	}
	var selected []dbInstance
	switch {
	case src.DBInstanceIdentifier != "":
		// AWS stores identifiers in lower case and matches them so.
		name := strings.ToLower(src.DBInstanceIdentifier)
		instances, err := relistIfMissing(ctx, p.s, instances, hasKey[dbInstance](name), listedAt(id, p.instances))
		if err != nil {
			return providers.Result{}, classify(err, field, "rds:DescribeDBInstances", t)
		}
		i, ok := instances[name]
		switch {
		case (!ok || !t.consents(i.tags)) && t.consentTag != "":
			return providers.Result{}, t.refused(field+".dbInstanceIdentifier", "DB instance", name)
		case !ok:
			return providers.Result{}, providers.Gone(v1alpha1.ReasonBackendNotFound, fmt.Errorf(
				"%s.dbInstanceIdentifier: DB instance %q not found in %s", field, src.DBInstanceIdentifier, id.region))
		}
		selected = []dbInstance{i}
	case src.DBClusterIdentifier != "":
		if selected, err = p.members(ctx, t, field, src, instances); err != nil {
			return providers.Result{}, err
		}
	default:
		for _, i := range instances {
			if hasTags(i.tags, src.Tags) && t.consents(i.tags) {
				selected = append(selected, i)
			}
		}
	}
	eps := []providers.Endpoint{}
	for _, i := range selected {
		more, err := p.endpoints(ctx, field, i, req.AddressTypes)
		if err != nil {
			return providers.Result{}, err
		}
		eps = append(eps, more...)
	}
	return providers.Result{Endpoints: eps, RefreshAfter: p.s.refresh}, nil
}

// members are the instances of the cluster src names that have src's role.
func (p *RDSProvider) members(ctx context.Context, t target, field string, src *v1alpha1.AWSRDSSource, instances map[string]dbInstance) ([]dbInstance, error) {
	name := strings.ToLower(src.DBClusterIdentifier)
	clusters, err := p.clusters(ctx, t.id, time.Time{})
	if err == nil {
		clusters, err = relistIfMissing(ctx, p.s, clusters, hasKey[dbCluster](name), listedAt(t.id, p.clusters))
	}
	if err != nil {
		return nil, classify(err, field, "rds:DescribeDBClusters", t)
	}
	c, ok := clusters[name]
	switch {
	case (!ok || !t.consents(c.tags)) && t.consentTag != "":
		return nil, t.refused(field+".dbClusterIdentifier", "DB cluster", name)
	case !ok:
		return nil, providers.Gone(v1alpha1.ReasonBackendNotFound, fmt.Errorf(
			"%s.dbClusterIdentifier: DB cluster %q not found in %s", field, src.DBClusterIdentifier, t.id.region))
	}
	var out []dbInstance
	for _, m := range c.members {
		// A member missing from the instance listing was added or
		// removed between the two listings: the next refresh has it.
		i, ok := instances[m.instance]
		if ok && roleMatches(src.Role, m.writer) {
			out = append(out, i)
		}
	}
	return out, nil
}

// roleMatches tells whether a member with IsClusterWriter = writer has role.
func roleMatches(role v1alpha1.AWSRDSRole, writer bool) bool {
	switch role {
	case v1alpha1.AWSRDSRoleWriter:
		return writer
	case v1alpha1.AWSRDSRoleReaders:
		return !writer
	}
	return true
}

// endpoints publishes one instance: its name when FQDN is asked for, and
// the addresses of the IP families asked for.
func (p *RDSProvider) endpoints(ctx context.Context, field string, i dbInstance, types []v1alpha1.AddressType) ([]providers.Endpoint, error) {
	if i.address == "" {
		return nil, nil
	}
	base := providers.Endpoint{Zone: i.zone, Hostname: hostname(i.id), Port: i.port}
	switch {
	case servingStatuses[i.status]:
		base.Serving = true
	case i.status == "deleting":
		base.Serving, base.Terminating = true, true
	}
	return p.s.publishName(ctx, field, "DB instance "+i.id, i.address, base, types)
}

// instances is the listing of every DB instance of id's region, by
// identifier, listed from since on when since is not zero.
func (p *RDSProvider) instances(ctx context.Context, id identity, since time.Time) (map[string]dbInstance, error) {
	st := listingOf(p.s, listingKey{id, describeDBInstances}, (*shared).dbInstancesSlot, func(ctx context.Context, c *clients) (map[string]dbInstance, error) {
		pages := rds.NewDescribeDBInstancesPaginator(c.rds, &rds.DescribeDBInstancesInput{MaxRecords: awssdk.Int32(100)},
			func(o *rds.DescribeDBInstancesPaginatorOptions) { o.StopOnDuplicateToken = true })
		return collect(ctx, pages.HasMorePages, pages.NextPage, func(p *rds.DescribeDBInstancesOutput) *string { return p.Marker }, func(out map[string]dbInstance, page *rds.DescribeDBInstancesOutput) {
			for _, d := range page.DBInstances {
				i := dbInstance{
					id:     strings.ToLower(awssdk.ToString(d.DBInstanceIdentifier)),
					status: awssdk.ToString(d.DBInstanceStatus),
					zone:   awssdk.ToString(d.AvailabilityZone),
					tags:   tagsOf(d.TagList),
				}
				if d.Endpoint != nil {
					i.address, i.port = awssdk.ToString(d.Endpoint.Address), awssdk.ToInt32(d.Endpoint.Port)
				}
				out[i.id] = i
			}
		})
	})
	return st.get(ctx, since)
}

// clusters is the listing of every DB cluster of id's region, by cluster
// identifier, listed from since on when since is not zero.
func (p *RDSProvider) clusters(ctx context.Context, id identity, since time.Time) (map[string]dbCluster, error) {
	st := listingOf(p.s, listingKey{id, describeDBClusters}, (*shared).dbClustersSlot, func(ctx context.Context, c *clients) (map[string]dbCluster, error) {
		pages := rds.NewDescribeDBClustersPaginator(c.rds, &rds.DescribeDBClustersInput{MaxRecords: awssdk.Int32(100)},
			func(o *rds.DescribeDBClustersPaginatorOptions) { o.StopOnDuplicateToken = true })
		return collect(ctx, pages.HasMorePages, pages.NextPage, func(p *rds.DescribeDBClustersOutput) *string { return p.Marker }, func(out map[string]dbCluster, page *rds.DescribeDBClustersOutput) {
			for _, c := range page.DBClusters {
				members := []dbMember{}
				for _, m := range c.DBClusterMembers {
					members = append(members, dbMember{
						instance: strings.ToLower(awssdk.ToString(m.DBInstanceIdentifier)),
						writer:   awssdk.ToBool(m.IsClusterWriter),
					})
				}
				out[strings.ToLower(awssdk.ToString(c.DBClusterIdentifier))] = dbCluster{members: members, tags: tagsOf(c.TagList)}
			}
		})
	})
	return st.get(ctx, since)
}

// tagsOf is an RDS TagList by key.
func tagsOf(list []rdstypes.Tag) map[string]string {
	return tagMap(list, func(t rdstypes.Tag) (*string, *string) { return t.Key, t.Value })
}

var _ providers.Provider = (*RDSProvider)(nil)
