package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackendProviderSpec describes one connection the platform team offers
// (a Consul cluster, an AWS account and region, a set of DNS resolvers, a
// provider plugin, or a range of fixed addresses) and the namespaces that
// may publish through it. Exactly one kind is set.
// +kubebuilder:validation:XValidation:rule="[has(self.static), has(self.dns), has(self.consul), has(self.aws), has(self.plugin), has(self.example)].filter(x, x).size() == 1",message="spec: set exactly one of static, dns, consul, aws, plugin"
// +kubebuilder:validation:XValidation:rule="!has(self.example)",message="spec.example: a made-up kind of backendslice's own tests, which no release serves; use another kind"
// +kubebuilder:validation:XValidation:rule="!has(self.static) || (has(self.allowedCIDRs) && self.allowedCIDRs.size() > 0)",message="spec.allowedCIDRs: a static provider must list the networks its namespaces may publish; fixed addresses are otherwise unbounded"
type BackendProviderSpec struct {
	// static admits static sources: no connection, only the namespaces and
	// the address ranges (allowedCIDRs) they may publish.
	// +optional
	Static *StaticProvider `json:"static,omitempty"`

	// dns is a set of resolvers for dns sources.
	// +optional
	DNS *DNSProvider `json:"dns,omitempty"`

	// consul is a Consul cluster (an agent's HTTP API) for consul sources.
	// +optional
	Consul *ConsulProvider `json:"consul,omitempty"`

	// aws is an AWS account and region for awsRDS, awsEC2, awsElastiCache
	// and awsMemoryDB sources.
	// +optional
	AWS *AWSProvider `json:"aws,omitempty"`

	// plugin is a provider plugin, a process of its own that answers the
	// plugin protocol (docs/plugins.md), for plugin sources.
	// +optional
	Plugin *PluginProvider `json:"plugin,omitempty"`

	// example is a made-up kind for backendslice's own tests (see
	// ExampleProvider); this CRD refuses it.
	// +optional
	Example *ExampleProvider `json:"example,omitempty"`

	// namespaces that may name this provider in a source's providerRef.
	// +required
	Namespaces NamespaceSelection `json:"namespaces"`

	// allowedCIDRs are the only networks an endpoint published through this
	// provider may be in: fixed addresses and every address a source
	// resolves to. Unset allows any address outside the controller's deny
	// list (metadata services, the cluster's own Service and Pod ranges);
	// a static provider must set it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c))",message="spec.allowedCIDRs: every entry must be a CIDR such as 192.0.2.0/24 or 2001:db8::/64"
	AllowedCIDRs []string `json:"allowedCIDRs,omitempty"`

	// probes bounds the active probes of endpoints published through this
	// provider. Unset, a probe may use only the target ports of the
	// backend's own Service.
	// +optional
	Probes *ProviderProbes `json:"probes,omitempty"`
}

// ProviderProbes is what the platform team lets probes of a provider's
// endpoints do beyond the default. A probe runs from the controller's
// network position, so each port it may use is a port tenants can test
// every address the provider admits on, from there.
type ProviderProbes struct {
	// allowedPorts are the ports, besides the target ports of the backend's
	// own Service, that probes of endpoints published through this provider
	// may use: a health port the Service does not expose. An endpoint
	// published through several providers may be probed on such a port
	// only when every one of them allows it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	AllowedPorts []PortRange `json:"allowedPorts,omitempty"`
}

// PortRange is one port, or the ports from port to endPort.
// +kubebuilder:validation:XValidation:rule="!has(self.endPort) || self.endPort >= self.port",message="spec.probes.allowedPorts[].endPort: must be at least port; write the lower bound in port"
type PortRange struct {
	// port, or the first port of the range.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// endPort is the last port of the range; unset allows port alone.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	EndPort *int32 `json:"endPort,omitempty"`
}

// Contains tells whether port is in r.
func (r PortRange) Contains(port int32) bool {
	end := r.Port
	if r.EndPort != nil {
		end = *r.EndPort
	}
	return r.Port <= port && port <= end
}

// NamespaceSelection names the namespaces admitted to a provider: those
// listed by name, and those whose labels match the selector. At least one
// is set; an empty selector ({}) admits every namespace.
// +kubebuilder:validation:XValidation:rule="has(self.names) || has(self.selector)",message="spec.namespaces: set names, selector or both; a provider no namespace may use serves nothing"
type NamespaceSelection struct {
	// names of namespaces admitted.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Names []string `json:"names,omitempty"`

	// selector admits the namespaces whose labels match it. A namespace
	// whose labels change so that it no longer matches loses its access at
	// once: what it published through this provider is withdrawn.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// StaticProvider admits static sources. It has no settings of its own: the
// provider's allowedCIDRs bound the addresses they may publish.
type StaticProvider struct{}

// DNSProvider is a set of DNS resolvers.
type DNSProvider struct {
	// resolvers to ask, host:port (port 53 when left out), in turn. Unset
	// uses the controller's --dns-resolvers.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=261
	Resolvers []string `json:"resolvers,omitempty"`
}

// SecretKeyReference names one key of a Secret in the controller's own
// namespace: the controller reads no Secret anywhere else.
type SecretKeyReference struct {
	// name of the Secret, in the namespace the controller runs in.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// ConsulProvider is a connection to one Consul cluster.
type ConsulProvider struct {
	// address of the Consul agent's HTTP API: host:port, or a URL whose
	// https:// scheme turns TLS on.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^(https?://)?[A-Za-z0-9.:\[\]-]+(:[0-9]+)?/?$`
	Address string `json:"address"`

	// tokenSecretRef holds the ACL token. A rotated Secret is used from the
	// next query on, without a restart.
	// +optional
	TokenSecretRef *SecretKeyReference `json:"tokenSecretRef,omitempty"`

	// tls verifies the agent's certificate; setting it implies https.
	// +optional
	TLS *ProviderTLS `json:"tls,omitempty"`

	// datacenter queried where a source names none; the agent's own when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_-]+$`
	Datacenter string `json:"datacenter,omitempty"`

	// allowedServices are globs ("payments-*", "*") of the Consul services
	// sources may read through this provider. Unset allows every service
	// the token can read.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9_.*?-]+$`
	AllowedServices []string `json:"allowedServices,omitempty"`

	// allowedDatacenters are globs of the datacenters sources may query
	// through this provider (a source naming none queries spec.datacenter,
	// else the agent's own, which is always allowed). Unset allows every
	// datacenter the token can read.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9_*?-]+$`
	AllowedDatacenters []string `json:"allowedDatacenters,omitempty"`

	// allowedNamespaces are globs of the Consul Enterprise namespaces
	// sources may read through this provider ("default" where a source
	// names none). Unset allows every namespace the token can read.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9_*?-]+$`
	AllowedNamespaces []string `json:"allowedNamespaces,omitempty"`

	// allowedPartitions are globs of the Consul Enterprise admin
	// partitions sources may read through this provider ("default" where a
	// source names none). Unset allows every partition the token can read.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9_*?-]+$`
	AllowedPartitions []string `json:"allowedPartitions,omitempty"`
}

// ProviderTLS verifies the certificate of a provider's server (a Consul
// agent, a plugin).
type ProviderTLS struct {
	// caSecretRef holds the PEM certificates of the CAs that sign the
	// server's certificate; unset uses the system's.
	// +optional
	CASecretRef *SecretKeyReference `json:"caSecretRef,omitempty"`

	// serverName is the name verified in the server's certificate when it
	// differs from the host in its address.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName,omitempty"`
}

// AWSProvider is an AWS account and region, reached with the controller's
// own credentials or a role it assumes.
type AWSProvider struct {
	// region of the instances and clusters, for example eu-west-1. Sources
	// through this provider read this region.
	// +required
	Region AWSRegion `json:"region"`

	// assumeRoleARN is assumed (through STS) to read the account; unset
	// reads with the controller's own identity.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$`
	AssumeRoleARN string `json:"assumeRoleARN,omitempty"`

	// endpointURL replaces the region's RDS, EC2, ElastiCache, MemoryDB
	// and STS endpoints (a VPC endpoint, or a test server).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://`
	EndpointURL string `json:"endpointURL,omitempty"`

	// consentTag, when set, publishes only the instances and clusters that
	// carry this tag with the source's namespace in its comma-separated
	// value (for example backendslice.io/namespaces=payments,billing): the
	// owner of the database agrees to its publication, as with a Gateway
	// API ReferenceGrant. ElastiCache and MemoryDB do not list tags with
	// their caches: with a consent tag, the tags of each cache a source
	// names are read with one more call (ListTagsForResource, ListTags)
	// per cache and refresh interval, shared by every backend.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ConsentTag string `json:"consentTag,omitempty"`
}

// PluginProvider is where a provider plugin listens, and how the controller
// talks to it. Only the platform team says where: sources name the
// BackendProvider, never a URL.
// +kubebuilder:validation:XValidation:rule="!has(self.tokenSecretRef) || self.url.startsWith('https://') || self.url.matches('^http://(localhost|127[.]0[.]0[.]1|[[]::1[]])(:[0-9]+)?(/.*)?$')",message="spec.plugin.tokenSecretRef: a token is sent only over https, or to a sidecar on localhost; use an https:// url (with tls.caSecretRef)"
// +kubebuilder:validation:XValidation:rule="!has(self.tls) || self.url.startsWith('https://')",message="spec.plugin.tls: set for an https:// url only; use https:// or remove tls"
type PluginProvider struct {
	// url of the plugin: http://127.0.0.1:PORT for a sidecar in the
	// controller's Pod, or https://NAME.NAMESPACE.svc:PORT for a Service.
	// The protocol's paths (/backendslice/v1/...) are added to it. No user
	// information, query or fragment.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^https?://([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)*/?$`
	URL string `json:"url"`

	// tls verifies the plugin's certificate (an https:// url).
	// +optional
	TLS *ProviderTLS `json:"tls,omitempty"`

	// tokenSecretRef holds a bearer token sent with every request, for the
	// plugin to tell the controller from anyone else that reaches it. A
	// rotated Secret is used from the next request on.
	// +optional
	TokenSecretRef *SecretKeyReference `json:"tokenSecretRef,omitempty"`

	// timeout bounds one request that is not a long-poll (and the wait of
	// a long-poll past its own wait time): 1s to 60s, 5s when unset.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('60s')",message="spec.plugin.timeout: between 1s and 60s"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// maxEndpoints is the most endpoints one answer may carry (1 to
	// 10000, 1000 when unset); an answer with more, or larger than 64 KiB
	// plus 512 bytes an endpoint, is refused as garbage and the source
	// keeps what it published.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxEndpoints int32 `json:"maxEndpoints,omitempty"`

	// maxConcurrentRequests is the most requests the controller sends the
	// plugin at once, long-polls aside (1 to 256, 8 when unset).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	MaxConcurrentRequests int32 `json:"maxConcurrentRequests,omitempty"`
}

// DefaultConsentTag is the tag key the documentation suggests for AWSProvider.ConsentTag.
const DefaultConsentTag = "backendslice.io/namespaces"

// BackendProviderStatus reports whether the provider is usable.
type BackendProviderStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// kind is the provider's kind (static, dns, consul, aws, plugin), for listings.
	// +optional
	Kind string `json:"kind,omitempty"`

	// conditions: Ready says whether the provider's settings and Secrets
	// can be used and, for a kind with a connection, whether that
	// connection answers its periodic check (ConnectionFailed when not).
	// Stalled is True, with Ready's reason and message, while Ready is
	// False, so that kstatus-based tools (Flux, kubectl-style waits) read a
	// failing provider as Failed instead of waiting out their timeout.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// BackendProvider is a connection to a Consul cluster, an AWS account, a set
// of DNS resolvers, a provider plugin or a range of fixed addresses, owned by the platform
// team, and the namespaces whose ExternalBackends may use it. Sources name
// it in providerRef.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bp,categories=backendslice
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.status.kind`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BackendProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec BackendProviderSpec `json:"spec"`
	// status is written by the controller. It defaults to observedGeneration
	// 0 so that kstatus reads a new provider as InProgress, not Current.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status BackendProviderStatus `json:"status,omitempty"`
}

// BackendProviderList is a list of BackendProviders.
// +kubebuilder:object:root=true
type BackendProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BackendProvider `json:"items"`
}
