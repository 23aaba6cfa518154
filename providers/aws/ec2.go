package aws

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// EC2Provider resolves awsEC2 sources: instances by ID or by tags.
//
// Each instance publishes its private IPv4 address (its public one when
// addressKind is Public) when the spec publishes IPv4, and its primary IPv6
// address when the spec publishes IPv6, in the zone of its placement.
//
// Instance state to endpoint condition:
//
//	state                    published as
//	running                  serving (ready)
//	pending                  not serving
//	stopping, shutting-down  draining (serving, terminating)
//	stopped, terminated      left out: what was published drains and leaves
//
// When none of the instance IDs a source lists exists, the backend is gone
// (BackendNotFound); IDs that no longer exist among others are left out.
//
// Through a BackendProvider with a consent tag, only instances whose tag
// lists the backend's namespace are published. Listed IDs that do not
// consent are left out as missing ones are; when none of the IDs is left,
// the source fails (AccessDenied) with one message for missing and
// refused IDs alike, so that a tenant cannot learn which instances exist,
// and what it published drains.
type EC2Provider struct{ member }

// ec2Instance is what the provider keeps of an EC2 instance.
type ec2Instance struct {
	id, state, private, public, ipv6, zone string
	tags                                   map[string]string
}

// Resolve returns the endpoints of the instances the source selects.
func (p *EC2Provider) Resolve(ctx context.Context, req providers.Request) (providers.Result, error) {
	src := req.Source.AWSEC2
	field, t, err := p.open(req, src != nil, func() (string, string) { return string(src.Region), src.AssumeRoleARN })
	if err != nil {
		return providers.Result{}, err
	}
	id := t.id
	p.s.use(KindEC2, req, listingKey{id, describeInstances})
	instances, err := p.instances(ctx, id, time.Time{})
	if err == nil && len(src.InstanceIDs) > 0 {
		anyOf := func(m map[string]ec2Instance) bool {
			return slices.ContainsFunc(src.InstanceIDs, func(iid string) bool { return hasKey[ec2Instance](iid)(m) })
		}
		instances, err = relistIfMissing(ctx, p.s, instances, anyOf, listedAt(id, p.instances))
	}
	if err != nil {
		return providers.Result{}, classify(err, field, "ec2:DescribeInstances", t)
	}
	var selected []ec2Instance
	if len(src.InstanceIDs) > 0 {
		for _, iid := range src.InstanceIDs {
			if i, ok := instances[iid]; ok && t.consents(i.tags) {
				selected = append(selected, i)
			}
		}
		switch {
		case len(selected) > 0:
		case t.consentTag != "":
			// Missing and refused IDs are named alike (see refused).
			return providers.Result{}, t.refused(field+".instanceIDs", "EC2 instance", src.InstanceIDs...)
		default:
			return providers.Result{}, providers.Gone(v1alpha1.ReasonBackendNotFound, fmt.Errorf(
				"%s.instanceIDs: none of %s exists in %s", field, strings.Join(src.InstanceIDs, ", "), id.region))
		}
	} else {
		for _, i := range instances {
			if hasTags(i.tags, src.Tags) && t.consents(i.tags) {
				selected = append(selected, i)
			}
		}
	}
	eps := []providers.Endpoint{}
	for _, i := range selected {
		eps = append(eps, ec2Endpoints(i, src.AddressKind, req.AddressTypes)...)
	}
	return providers.Result{Endpoints: eps, RefreshAfter: p.s.refresh}, nil
}

// ec2Endpoints publishes one instance as its state says.
func ec2Endpoints(i ec2Instance, kind v1alpha1.AWSEC2AddressKind, types []v1alpha1.AddressType) []providers.Endpoint {
	base := providers.Endpoint{Zone: i.zone, Hostname: hostname(i.id)}
	switch i.state {
	case "running":
		base.Serving = true
	case "pending":
	case "stopping", "shutting-down":
		base.Serving, base.Terminating = true, true
	default:
		return nil
	}
	var addrs []string
	if wants(types, v1alpha1.AddressTypeIPv4) {
		if kind == v1alpha1.AWSEC2AddressPublic {
			addrs = append(addrs, i.public)
		} else {
			addrs = append(addrs, i.private)
		}
	}
	if wants(types, v1alpha1.AddressTypeIPv6) {
		addrs = append(addrs, i.ipv6)
	}
	var out []providers.Endpoint
	for _, a := range addrs {
		if a != "" {
			ep := base
			ep.Address = a
			out = append(out, ep)
		}
	}
	return out
}

// instances is the listing of every EC2 instance of id's region, by ID, no
// older than since when it is not zero.
func (p *EC2Provider) instances(ctx context.Context, id identity, since time.Time) (map[string]ec2Instance, error) {
	st := listingOf(p.s, listingKey{id, describeInstances}, (*shared).instancesSlot, func(ctx context.Context, c *clients) (map[string]ec2Instance, error) {
		pages := ec2.NewDescribeInstancesPaginator(c.ec2, &ec2.DescribeInstancesInput{MaxResults: awssdk.Int32(1000)},
			func(o *ec2.DescribeInstancesPaginatorOptions) { o.StopOnDuplicateToken = true })
		return collect(ctx, pages.HasMorePages, pages.NextPage, func(p *ec2.DescribeInstancesOutput) *string { return p.NextToken }, func(out map[string]ec2Instance, page *ec2.DescribeInstancesOutput) {
			for _, r := range page.Reservations {
				for _, in := range r.Instances {
					i := ec2Instance{
						id:      awssdk.ToString(in.InstanceId),
						private: awssdk.ToString(in.PrivateIpAddress),
						public:  awssdk.ToString(in.PublicIpAddress),
						ipv6:    awssdk.ToString(in.Ipv6Address),
						tags:    tagMap(in.Tags, func(t ec2types.Tag) (*string, *string) { return t.Key, t.Value }),
					}
					if in.State != nil {
						i.state = string(in.State.Name)
					}
					if in.Placement != nil {
						i.zone = awssdk.ToString(in.Placement.AvailabilityZone)
					}
					out[i.id] = i
				}
			}
		})
	})
	return st.get(ctx, since)
}

var _ providers.Provider = (*EC2Provider)(nil)
