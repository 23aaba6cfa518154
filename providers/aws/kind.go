package aws

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// The source kinds of spec.sources[].awsRDS, awsEC2, awsElastiCache and
// awsMemoryDB.
const (
	KindRDS         providers.Kind = "awsRDS"
	KindEC2         providers.Kind = "awsEC2"
	KindElastiCache providers.Kind = "awsElastiCache"
	KindMemoryDB    providers.Kind = "awsMemoryDB"
)

// Settings are an AWS BackendProvider's connection: an AWS account and
// region.
type Settings struct {
	Region string
	// AssumeRoleARN is assumed through STS; empty reads as the controller.
	AssumeRoleARN string
	// EndpointURL replaces the RDS, EC2, ElastiCache, MemoryDB and STS
	// endpoints when set.
	EndpointURL string
	// ConsentTag, when set, publishes only instances, clusters and caches
	// whose tag of this key lists the request's namespace (comma-separated).
	ConsentTag string
}

// Kinds are the rows of the table of source kinds this package serves:
// the four AWS source kinds, through one AWS BackendProvider kind and one
// Session (credentials, clients and the cached listings every backend
// reads) configured by the --aws-* flags. Built afresh at each call.
func Kinds() providers.Kinds {
	p := &providers.ProviderKind{
		Name:       "aws",
		Of:         func(s v1alpha1.BackendProviderSpec) bool { return s.AWS != nil },
		Connect:    connect,
		FlagPrefix: "aws-",
		Configure: func(fs *pflag.FlagSet) providers.Constructor {
			var o Options
			o.BindFlags(fs)
			return func(ctx context.Context, env providers.Env) ([]providers.Provider, error) {
				o.Log = env.Log.WithName("aws")
				s, err := New(ctx, o)
				if err != nil {
					return nil, err
				}
				return []providers.Provider{s.RDS(), s.EC2(), s.ElastiCache(), s.MemoryDB()}, nil
			}
		},
	}
	return providers.Kinds{
		{Kind: KindRDS, Of: func(s v1alpha1.Source) bool { return s.AWSRDS != nil }, Provider: p, Check: checkRDSSelects},
		{Kind: KindEC2, Of: func(s v1alpha1.Source) bool { return s.AWSEC2 != nil }, Provider: p, Check: checkEC2Selects},
		// Admission refuses what selects nothing: every cache source names
		// one cache, and the CRD has refused empty names since these kinds
		// exist, so no stored object needs a check of the controller's.
		{Kind: KindElastiCache, Of: func(s v1alpha1.Source) bool { return s.AWSElastiCache != nil }, Provider: p},
		{Kind: KindMemoryDB, Of: func(s v1alpha1.Source) bool { return s.AWSMemoryDB != nil }, Provider: p},
	}
}

// settingsOf are cc's AWS settings, nil for a connection of another kind.
func settingsOf(cc *providers.Connection) *Settings {
	s, _ := providers.SettingsOf[*Settings](cc)
	return s
}

// connect is the account and region of bp; the controller's own
// credentials assume its role.
func connect(_ context.Context, bp *v1alpha1.BackendProvider, _ providers.SecretReader) (*providers.Connection, error) {
	s := bp.Spec.AWS
	conn := providers.NewConnection(bp)
	conn.Settings = &Settings{Region: string(s.Region), AssumeRoleARN: s.AssumeRoleARN, EndpointURL: s.EndpointURL, ConsentTag: s.ConsentTag}
	return conn, nil
}

// checkEC2Selects refuses an EC2 source that selects nothing: the provider
// reads an empty selector as "no filter", every instance in the region.
func checkEC2Selects(src v1alpha1.Source) string {
	s := src.AWSEC2
	if len(s.InstanceIDs) > 0 || len(s.Tags) > 0 {
		return ""
	}
	return fmt.Sprintf(
		"spec.sources[%s].awsEC2: no instance IDs and no tags would select every instance in %s; list instance IDs or name at least one tag",
		src.Name, s.Region)
}

// checkRDSSelects refuses an RDS source that selects nothing, as
// checkEC2Selects does for EC2.
func checkRDSSelects(src v1alpha1.Source) string {
	s := src.AWSRDS
	if s.DBInstanceIdentifier != "" || s.DBClusterIdentifier != "" || len(s.Tags) > 0 {
		return ""
	}
	return fmt.Sprintf(
		"spec.sources[%s].awsRDS: no identifier and no tags would select every DB instance in %s; set dbInstanceIdentifier, dbClusterIdentifier or at least one tag",
		src.Name, s.Region)
}
