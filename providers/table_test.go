package providers_test

import (
	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// The kinds of the registry's tests: rows of the test's own, so that the
// registry is tested apart from the kinds the binary has.
const (
	kindStatic providers.Kind = "static"
	kindDNS    providers.Kind = "dns"
	kindConsul providers.Kind = "consul"
	kindAWSRDS providers.Kind = "awsRDS"
	kindAWSEC2 providers.Kind = "awsEC2"
)

// table is a table of source kinds over five fields of v1alpha1.Source,
// awsRDS and awsEC2 served by one provider kind as in the binary's.
func table() providers.Kinds {
	provider := func(name string, of func(v1alpha1.BackendProviderSpec) bool) *providers.ProviderKind {
		return &providers.ProviderKind{Name: name, Of: of}
	}
	aws := provider("aws", func(s v1alpha1.BackendProviderSpec) bool { return s.AWS != nil })
	return providers.Kinds{
		{Kind: kindStatic, Of: func(s v1alpha1.Source) bool { return s.Static != nil },
			Provider: provider("static", func(s v1alpha1.BackendProviderSpec) bool { return s.Static != nil })},
		{Kind: kindDNS, Of: func(s v1alpha1.Source) bool { return s.DNS != nil },
			Provider: provider("dns", func(s v1alpha1.BackendProviderSpec) bool { return s.DNS != nil })},
		{Kind: kindConsul, Of: func(s v1alpha1.Source) bool { return s.Consul != nil },
			Provider: provider("consul", func(s v1alpha1.BackendProviderSpec) bool { return s.Consul != nil })},
		{Kind: kindAWSRDS, Of: func(s v1alpha1.Source) bool { return s.AWSRDS != nil }, Provider: aws},
		{Kind: kindAWSEC2, Of: func(s v1alpha1.Source) bool { return s.AWSEC2 != nil }, Provider: aws},
	}
}
