package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddressType is an address family published in EndpointSlices.
// +kubebuilder:validation:Enum=IPv4;IPv6;FQDN
type AddressType string

// Address families, named as EndpointSlice addressType names them.
const (
	AddressTypeIPv4 AddressType = "IPv4"
	AddressTypeIPv6 AddressType = "IPv6"
	AddressTypeFQDN AddressType = "FQDN"
)

// DefaultMaxEndpointsPerBackend is the default of the controller's
// --max-endpoints-per-backend: the most endpoints of one address family
// one ExternalBackend publishes. The spec's rules on the addresses it
// lists itself (static endpoints, EC2 instance IDs) repeat the number, as
// markers cannot name a constant: a spec that lists more than the
// controller would publish is refused rather than cut.
const DefaultMaxEndpointsPerBackend = 10000

// ServiceType is how the generated Service is exposed inside the cluster.
// +kubebuilder:validation:Enum=ClusterIP;Headless
type ServiceType string

// Service types.
const (
	// ServiceTypeClusterIP gives the Service a virtual IP that kube-proxy balances.
	ServiceTypeClusterIP ServiceType = "ClusterIP"
	// ServiceTypeHeadless gives the Service no virtual IP: cluster DNS answers
	// with the endpoint addresses themselves.
	ServiceTypeHeadless ServiceType = "Headless"
)

// Protocol is a transport protocol of a Service port.
// +kubebuilder:validation:Enum=TCP;UDP;SCTP
type Protocol string

// Health is the health an endpoint is published with.
// +kubebuilder:validation:Enum=Healthy;Unhealthy;Draining
type Health string

// Endpoint health values.
const (
	// HealthHealthy serves traffic: ready=true, serving=true.
	HealthHealthy Health = "Healthy"
	// HealthUnhealthy is published but takes no traffic: ready=false, serving=false.
	HealthUnhealthy Health = "Unhealthy"
	// HealthDraining is going away: ready=false, serving=true, terminating=true.
	HealthDraining Health = "Draining"
)

// ExternalBackendSpec describes an outside backend and the Service that fronts it.
//
// The API server runs these rules on every write of the object, status
// patches included, so they are written to cost little per endpoint: each
// reads an endpoint's address once, with one anchored pattern where two
// tests would do (no ':' and a letter is a name; no ':' and no letter, an
// IPv4 address), and the caps first count all static endpoints and
// instance IDs, a bound on every family's count, before counting one
// family's. Side by side on one API server, that took the CPU of a create
// of a 10,000-endpoint backend from 2.5 s to 1.4 s, and of a status patch
// of it from 2.5 s to 2.1 s.
// +kubebuilder:validation:XValidation:rule="self.addressTypes.exists(t, t == 'FQDN') || !self.sources.exists(s, has(s.static) && s.static.endpoints.exists(e, e.address.matches('^[^:]*[a-zA-Z][^:]*$')))",message="spec.sources[].static.endpoints[].address: a DNS name is published only when spec.addressTypes includes FQDN; add FQDN or use an IP address"
// +kubebuilder:validation:XValidation:rule="self.sources.map(s, (has(s.static) ? s.static.endpoints.size() : 0) + (has(s.awsEC2) && has(s.awsEC2.instanceIDs) ? s.awsEC2.instanceIDs.size() : 0)).sum() <= 10000 || self.sources.map(s, (has(s.static) ? s.static.endpoints.filter(e, e.address.matches('^[^:a-zA-Z]*$')).size() : 0) + (has(s.awsEC2) && has(s.awsEC2.instanceIDs) ? s.awsEC2.instanceIDs.size() : 0)).sum() <= 10000",message="spec.sources: more than 10000 IPv4 addresses in static endpoints and awsEC2 instanceIDs together; the controller publishes at most 10000 endpoints of an address family per backend (--max-endpoints-per-backend): split the backend into several ExternalBackends"
// +kubebuilder:validation:XValidation:rule="self.sources.map(s, (has(s.static) ? s.static.endpoints.size() : 0) + (has(s.awsEC2) && has(s.awsEC2.instanceIDs) ? s.awsEC2.instanceIDs.size() : 0)).sum() <= 10000 || self.sources.map(s, (has(s.static) ? s.static.endpoints.filter(e, e.address.contains(':')).size() : 0) + (has(s.awsEC2) && has(s.awsEC2.instanceIDs) ? s.awsEC2.instanceIDs.size() : 0)).sum() <= 10000",message="spec.sources: more than 10000 IPv6 addresses in static endpoints and awsEC2 instanceIDs together; the controller publishes at most 10000 endpoints of an address family per backend (--max-endpoints-per-backend): split the backend into several ExternalBackends"
// +kubebuilder:validation:XValidation:rule="self.sources.map(s, (has(s.static) ? s.static.endpoints.size() : 0) + (has(s.awsEC2) && has(s.awsEC2.instanceIDs) ? s.awsEC2.instanceIDs.size() : 0)).sum() <= 10000 || self.sources.map(s, (has(s.static) ? s.static.endpoints.filter(e, e.address.matches('^[^:]*[a-zA-Z][^:]*$')).size() : 0)).sum() <= 10000",message="spec.sources: more than 10000 DNS names in static endpoints; the controller publishes at most 10000 endpoints of an address family per backend (--max-endpoints-per-backend): split the backend into several ExternalBackends"
type ExternalBackendSpec struct {
	// service describes the selectorless Service that fronts the backend.
	// +required
	Service ServiceSpec `json:"service"`

	// sources list where the backend's endpoints come from. Endpoints of all
	// sources are merged and de-duplicated by address.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Sources []Source `json:"sources"`

	// addressTypes are the address families to publish, each in EndpointSlices
	// of its own. FQDN is opt-in: kube-proxy ignores FQDN slices, so names are
	// resolved to IPs unless FQDN is listed here.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:default={IPv4,IPv6}
	AddressTypes []AddressType `json:"addressTypes,omitempty"`

	// drainPeriod is how long an endpoint that vanished from its source stays
	// published as terminating (ready=false, terminating=true) before it is
	// removed. Unset takes the controller's --default-drain-period; "0s"
	// removes vanished endpoints at once; at most 1h.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-+]?(0|(([0-9]+[.]?[0-9]*|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$')",message="spec.drainPeriod: not a duration; write a number and a unit (h, m, s, ms), such as 30s, 5m or 1h"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[-+]?(0|(([0-9]+[.]?[0-9]*|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || duration(self) >= duration('0s')",message="spec.drainPeriod: negative; use 0s or more",messageExpression="'spec.drainPeriod: ' + self + ' is negative; use 0s or more'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[-+]?(0|(([0-9]+[.]?[0-9]*|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') || duration(self) <= duration('1h')",message="spec.drainPeriod: longer than the maximum of 1h; use 1h or less",messageExpression="'spec.drainPeriod: ' + self + ' is longer than the maximum of 1h; use 1h or less'"
	DrainPeriod *metav1.Duration `json:"drainPeriod,omitempty"`

	// maxEndpointsPerSlice caps the endpoints in one EndpointSlice. Unset takes
	// the controller's --max-endpoints-per-slice (100 unless changed). The
	// controller raises it to its floor (--min-endpoints-per-slice), and as
	// far as needed (up to 1000) to keep the backend within its limit of
	// slices (--max-slices-per-backend); the Synced condition says when.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxEndpointsPerSlice *int32 `json:"maxEndpointsPerSlice,omitempty"`

	// probe checks every endpoint from the controller, unless its source
	// sets a probe of its own. Unset: no probes, health is the sources'.
	// +optional
	Probe *Probe `json:"probe,omitempty"`

	// suspend stops reconciliation: nothing is resolved or written, and what
	// was published stays as it is.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ServiceSpec is the Service the controller writes.
type ServiceSpec struct {
	// name of the Service. Defaults to the ExternalBackend's name, which must
	// then be a valid Service name (a DNS-1035 label of at most 63 characters).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// type is ClusterIP (a virtual IP balanced by kube-proxy) or Headless
	// (cluster DNS answers with the endpoint addresses).
	// +optional
	// +kubebuilder:default=ClusterIP
	Type ServiceType `json:"type,omitempty"`

	// ports of the Service. Each port's targetPort is the port on the backend.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:XValidation:rule="self.all(p, self.exists_one(q, q.port == p.port && q.protocol == p.protocol))",message="spec.service.ports: two ports share a port number and protocol; give each (port, protocol) pair once"
	Ports []ServicePort `json:"ports"`

	// labels added to the Service and its EndpointSlices.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('endpointslice.kubernetes.io/') && k != 'kubernetes.io/service-name' && k != 'service.kubernetes.io/headless')",message="spec.service.labels: keys owned by Kubernetes (kubernetes.io/service-name, endpointslice.kubernetes.io/*, service.kubernetes.io/headless) cannot be set"
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the Service.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// trafficDistribution is copied to the Service (for example PreferClose):
	// a hint to kube-proxy and meshes to prefer endpoints in the client's zone.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TrafficDistribution *string `json:"trafficDistribution,omitempty"`

	// adopt, when set, lets this backend take over an existing selectorless
	// Service of its name in its namespace that no controller owns (a
	// hand-written one), instead of refusing it (ServiceConflict). The
	// Service object is kept, so its cluster IP and DNS name do not change.
	// Its hand-written EndpointSlices (and a legacy Endpoints object) are
	// removed only once this backend's slices carry each of their ready
	// endpoints as ready; slices another controller manages are never
	// touched. The opt-in is a field of this spec, not a mark on the
	// Service, because only who may write ExternalBackends in this
	// namespace may ask for it. To undo: delete the ExternalBackend with
	// orphan propagation (kubectl delete --cascade=orphan): the Service and
	// the slices stay.
	// +optional
	Adopt *ServiceAdoption `json:"adopt,omitempty"`
}

// ServiceAdoption says which of an adopted Service's EndpointSlices are
// hand-written, and so replaced by this backend's.
type ServiceAdoption struct {
	// handWrittenManagedBy are values of the endpointslice.kubernetes.io/managed-by
	// label that mark a slice as hand-written (the Kubernetes documentation's
	// example uses "cluster-admins"). Slices without the label are always
	// hand-written; slices with another value are another controller's and
	// are left alone.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:XValidation:rule="self.all(v, !(v in ['endpointslice-controller.k8s.io', 'endpointslicemirroring-controller.k8s.io', 'externalbackend-controller.backendslice.io']))",message="spec.service.adopt.handWrittenManagedBy: the slices of Kubernetes' own controllers (endpointslice-controller.k8s.io, endpointslicemirroring-controller.k8s.io) and backendslice's own are never hand-written; remove that value"
	HandWrittenManagedBy []string `json:"handWrittenManagedBy,omitempty"`
}

// ServicePort is one port of the Service.
type ServicePort struct {
	// name of the port, a DNS-1123 label unique in the Service. EndpointSlice
	// ports carry the same name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// port the Service listens on inside the cluster.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// targetPort is the port on the backend. Defaults to port.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TargetPort *int32 `json:"targetPort,omitempty"`

	// protocol is TCP, UDP or SCTP.
	// +optional
	// +kubebuilder:default=TCP
	Protocol Protocol `json:"protocol,omitempty"`

	// appProtocol names the application protocol (for example
	// kubernetes.io/h2c or postgresql) for meshes and gateways.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	AppProtocol *string `json:"appProtocol,omitempty"`
}

// Source is one place endpoints come from. Exactly one kind is set.
// +kubebuilder:validation:XValidation:rule="[has(self.static), has(self.dns), has(self.consul), has(self.awsRDS), has(self.awsEC2), has(self.awsElastiCache), has(self.awsMemoryDB), has(self.plugin), has(self.example)].filter(x, x).size() == 1",message="spec.sources[]: set exactly one of static, dns, consul, awsRDS, awsEC2, awsElastiCache, awsMemoryDB, plugin"
// +kubebuilder:validation:XValidation:rule="!has(self.example)",message="spec.sources[].example: a made-up kind of backendslice's own tests, which no release serves; use another kind"
// +kubebuilder:validation:XValidation:rule="!has(self.plugin) || has(self.providerRef)",message="spec.sources[].providerRef: a plugin source names the BackendProvider of its plugin (kubectl get backendproviders); where a plugin listens is the platform team's to say"
type Source struct {
	// name identifies the source on status; a DNS-1123 label unique in the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// providerRef names the BackendProvider (cluster-scoped, owned by the
	// platform team) the source publishes through: its connection, and its
	// rules on which namespaces, services and addresses it serves. A source
	// without one uses the controller's own connection, which only an
	// install started with --allow-sources-without-provider permits.
	// +optional
	ProviderRef *ProviderReference `json:"providerRef,omitempty"`

	// static lists fixed addresses.
	// +optional
	Static *StaticSource `json:"static,omitempty"`

	// dns resolves a DNS name's A and AAAA records.
	// +optional
	DNS *DNSSource `json:"dns,omitempty"`

	// consul reads a Consul service's instances and their health checks.
	// +optional
	Consul *ConsulSource `json:"consul,omitempty"`

	// awsRDS reads RDS DB instances or the members of an Aurora cluster.
	// +optional
	AWSRDS *AWSRDSSource `json:"awsRDS,omitempty"`

	// awsEC2 reads EC2 instances by ID or tag.
	// +optional
	AWSEC2 *AWSEC2Source `json:"awsEC2,omitempty"`

	// awsElastiCache reads an ElastiCache replication group (Valkey or
	// Redis OSS), a cache cluster (Memcached) or a serverless cache.
	// +optional
	AWSElastiCache *AWSElastiCacheSource `json:"awsElastiCache,omitempty"`

	// awsMemoryDB reads the nodes of a MemoryDB cluster's shards.
	// +optional
	AWSMemoryDB *AWSMemoryDBSource `json:"awsMemoryDB,omitempty"`

	// plugin asks the provider plugin of the BackendProvider in
	// providerRef, a process of its own (docs/plugins.md).
	// +optional
	Plugin *PluginSource `json:"plugin,omitempty"`

	// example is a made-up kind for backendslice's own tests (see
	// ExampleSource); this CRD refuses it.
	// +optional
	Example *ExampleSource `json:"example,omitempty"`

	// probe checks this source's endpoints from the controller, in place
	// of spec.probe.
	// +optional
	Probe *Probe `json:"probe,omitempty"`
}

// ProviderReference names a BackendProvider.
type ProviderReference struct {
	// name of the BackendProvider.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// StaticSource is a fixed list of endpoints.
type StaticSource struct {
	// endpoints of the backend, each address at most once.
	// +required
	// +listType=map
	// +listMapKey=address
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	Endpoints []StaticEndpoint `json:"endpoints"`
}

// StaticEndpoint is one fixed endpoint.
type StaticEndpoint struct {
	// The name rules of address run on each of up to 16,000 addresses
	// (16 sources of 1000): string functions rather than regular
	// expressions keep them within the API server's cost budget. A name
	// there is lower case, and ends in a dot only when all its letters are
	// hex digits (the pattern's first alternative).

	// address is an IPv4 or IPv6 address, or a DNS name when spec.addressTypes
	// includes FQDN. Loopback, link-local and unspecified addresses are refused:
	// the API server would reject them in an EndpointSlice. So are
	// IPv4-mapped IPv6 addresses (::ffff:192.0.2.7: write 192.0.2.7), numbers
	// written as names (1684301000, 0x64.0x64.0x64.0xc8: write the address)
	// and names that lead back into the cluster, to the host or to a cloud's
	// metadata service: in the cluster's DNS domain (cluster.local, or ending
	// in .svc or .pod), a Service of a namespace every cluster has
	// (kubernetes.default), localhost and names under it, the metadata
	// services' names (metadata.google.internal, metadata.goog,
	// instance-data.*) and names of one label, which resolvers complete.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([0-9a-fA-F:.]+|([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?)$`
	// +kubebuilder:validation:XValidation:rule="!self.contains(':') || isIP(self)",message="is not a valid IPv6 address",messageExpression="isIP(self.lowerAscii().replace(':ffff:', ':fffe:', 1)) ? 'spec.sources[].static.endpoints[].address: an IPv4-mapped IPv6 address is not accepted; write ' + (self.contains('.') ? self.substring(self.lastIndexOf(':') + 1) : 'the IPv4 address of its last 32 bits (a.b.c.d)') + ' instead' : 'is not a valid IPv6 address'"
	// +kubebuilder:validation:XValidation:rule="self.contains(':') || isIP(self) || self.matches('[a-zA-Z]')",message="is not a valid IPv4 address",messageExpression="self.split('.').size() == 4 && !self.endsWith('.') ? 'is not a valid IPv4 address' : 'spec.sources[].static.endpoints[].address: looks like an IP address written as a name; write the address'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('0x') || self.matches('[g-wyz]|\\\\b[a-fx]')",message="spec.sources[].static.endpoints[].address: looks like an IP address written as a name; write the address"
	// +kubebuilder:validation:XValidation:rule="self != 'cluster.local' && !self.endsWith('.cluster.local') && !self.endsWith('.svc')",message="spec.sources[].static.endpoints[].address: a name in the cluster's DNS domain (cluster.local, or <service>.<namespace>.svc) points back into the cluster; name the outside backend"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || (!ip(self).isLoopback() && !ip(self).isUnspecified() && !ip(self).isLinkLocalUnicast() && !ip(self).isLinkLocalMulticast())",message="loopback, link-local and unspecified addresses cannot be endpoints; use the backend's routable address"
	// +kubebuilder:validation:XValidation:rule="!self.matches('[a-z]') || self.contains(':') || (self.endsWith('.') ? self.substring(0, self.size() - 1) : self).contains('.')",message="spec.sources[].static.endpoints[].address: a name of one label is completed by the resolver's search path, possibly into the cluster (db becomes db.<namespace>.svc.cluster.local); write the whole DNS name, such as db.example.com"
	// +kubebuilder:validation:XValidation:rule="self != 'localhost' && !self.endsWith('.localhost')",message="spec.sources[].static.endpoints[].address: localhost and names under it resolve to the host's own loopback address (RFC 6761); name the outside backend"
	// +kubebuilder:validation:XValidation:rule="!(self in ['metadata.google.internal', 'metadata.goog']) && !self.endsWith('.metadata.google.internal') && !self.endsWith('.metadata.goog')",message="spec.sources[].static.endpoints[].address: a name of a cloud's instance metadata service (metadata.google.internal, metadata.goog and names under them, instance-data.*) must not be published; name the outside backend"
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('instance-data.')",message="spec.sources[].static.endpoints[].address: a name of a cloud's instance metadata service (metadata.google.internal, metadata.goog and names under them, instance-data.*) must not be published; name the outside backend"
	// +kubebuilder:validation:XValidation:rule="!self.endsWith('.pod') && !(self.substring(self.indexOf('.') + 1) in ['default', 'kube-system', 'kube-public', 'kube-node-lease'])",message="spec.sources[].static.endpoints[].address: Pods' DNS search paths complete this name into the cluster (a Service of default, kube-system, kube-public or kube-node-lease, such as kubernetes.default, or a name ending in .pod); name the outside backend"
	Address string `json:"address"`

	// zone of the endpoint (for example eu-west-1a), used for topology hints.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`

	// hostname of the endpoint, a DNS-1123 label; headless Services publish it in DNS.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Hostname string `json:"hostname,omitempty"`

	// health overrides the endpoint's health; Healthy unless set.
	// +optional
	// +kubebuilder:default=Healthy
	Health Health `json:"health,omitempty"`
}

// DNSSource resolves a DNS name to endpoints.
type DNSSource struct {
	// name to resolve (A and AAAA records, following CNAMEs). An IP address
	// written as a name is refused, and so are names that lead back into the
	// cluster, to the host or to a cloud's metadata service: in the
	// cluster's DNS domain (cluster.local, or ending in .svc or .pod), a
	// Service of a namespace every cluster has (kubernetes.default),
	// localhost and names under it, the metadata services' names
	// (metadata.google.internal, metadata.goog, instance-data.*) and names
	// of one label, which resolvers complete.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.size() > 253 || self.matches('^([A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?[.])*[A-Za-z0-9_]([-A-Za-z0-9_]{0,61}[A-Za-z0-9_])?[.]?$')",message="spec.sources[].dns.name: not a DNS name (labels of 1 to 63 letters, digits, '-' or '_', separated by dots); an IP address belongs in a static source"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(?i)^(0x[0-9a-f]*|[0-9]+)([.](0x[0-9a-f]*|[0-9]+))*[.]?$')",message="spec.sources[].dns.name: looks like an IP address written as a name; write the address in a static source"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(?i)(^|[.])(cluster[.]local|svc)[.]?$')",message="spec.sources[].dns.name: a name in the cluster's DNS domain (cluster.local, or <service>.<namespace>.svc) points back into the cluster; name the outside backend"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[A-Za-z0-9_-]+[.]?$') || self.matches('^[0-9]+[.]?$')",message="spec.sources[].dns.name: a name of one label is completed by the resolver's search path, possibly into the cluster (db becomes db.<namespace>.svc.cluster.local); write the whole DNS name, such as db.example.com"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(?i)(^|[.])localhost[.]?$')",message="spec.sources[].dns.name: localhost and names under it resolve to the host's own loopback address (RFC 6761); name the outside backend"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(?i)(^|[.])(metadata[.]google[.]internal|metadata[.]goog)[.]?$') && !self.matches('(?i)^instance-data([.]|$)')",message="spec.sources[].dns.name: a name of a cloud's instance metadata service (metadata.google.internal, metadata.goog and names under them, instance-data.*) must not be published; name the outside backend"
	// +kubebuilder:validation:XValidation:rule="!self.matches('(?i)^[^.]+[.](default|kube-system|kube-public|kube-node-lease)[.]?$') && !self.matches('(?i)(^|[.])pod[.]?$')",message="spec.sources[].dns.name: Pods' DNS search paths complete this name into the cluster (a Service of default, kube-system, kube-public or kube-node-lease, such as kubernetes.default, or a name ending in .pod); name the outside backend"
	Name string `json:"name"`

	// minRefresh is the shortest time between two lookups, whatever the TTL;
	// at least 1s, and never below the controller's --dns-min-refresh.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="spec.sources[].dns.minRefresh: shorter than 1s; a lookup loop that fast would load the resolver, use 1s or more"
	MinRefresh *metav1.Duration `json:"minRefresh,omitempty"`

	// maxRefresh is the longest time between two lookups, whatever the TTL;
	// at least 1s, and never below the controller's --dns-min-refresh.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="spec.sources[].dns.maxRefresh: shorter than 1s; a lookup loop that fast would load the resolver, use 1s or more"
	MaxRefresh *metav1.Duration `json:"maxRefresh,omitempty"`
}

// ConsulSource reads a service from the Consul catalog. The Consul address,
// TLS settings and ACL token come from the controller's configuration.
type ConsulSource struct {
	// service name in Consul: 1 to 128 letters, digits, '-', '_' and '.',
	// starting and ending with a letter or digit.
	// +required
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.size() > 128 || (self.matches('^[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?$') && !self.contains('..'))",message="spec.sources[].consul.service: a Consul service name is 1 to 128 letters, digits, '-', '_' and '.', starting and ending with a letter or digit, without '..'"
	Service string `json:"service"`

	// datacenter to query; the agent's own when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.size() > 64 || self.matches('^[a-zA-Z0-9_-]*$')",message="spec.sources[].consul.datacenter: a Consul datacenter name is letters, digits, '-' and '_', at most 64 characters"
	Datacenter string `json:"datacenter,omitempty"`

	// tags an instance must all carry.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:XValidation:rule="self.size() > 128 || self.matches('^[a-zA-Z0-9_.:=-]+$')",message="spec.sources[].consul.tags[]: a tag is 1 to 128 letters, digits, '-', '_', '.', ':' and '='"
	Tags []string `json:"tags,omitempty"`

	// namespace (Consul Enterprise).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.size() > 63 || self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$')",message="spec.sources[].consul.namespace: a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
	Namespace string `json:"namespace,omitempty"`

	// partition (Consul Enterprise).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.size() > 63 || self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$')",message="spec.sources[].consul.partition: a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
	Partition string `json:"partition,omitempty"`

	// nodeMeta an instance's node must carry: at most 64 pairs, keys of 1 to
	// 128 letters, digits, '-' and '_', values of at most 512 characters
	// (Consul's own limits).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() >= 1 && k.size() <= 128 && self[k].size() <= 512)",message="spec.sources[].consul.nodeMeta: keys are 1 to 128 characters and values at most 512"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() > 128 || k.matches('^[a-zA-Z0-9_-]*$'))",message="spec.sources[].consul.nodeMeta: keys are letters, digits, '-' and '_'"
	NodeMeta map[string]string `json:"nodeMeta,omitempty"`

	// onlyPassing lets only instances whose checks all pass serve; the others
	// stay published as not ready. Without it, warning instances serve too.
	// +optional
	OnlyPassing bool `json:"onlyPassing,omitempty"`

	// zoneMetaKey is the service-meta or node-meta key that holds the zone.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ZoneMetaKey string `json:"zoneMetaKey,omitempty"`
}

// AWSRDSRole selects members of an Aurora cluster.
// +kubebuilder:validation:Enum=writer;readers;any
type AWSRDSRole string

// Aurora cluster roles.
const (
	AWSRDSRoleWriter  AWSRDSRole = "writer"
	AWSRDSRoleReaders AWSRDSRole = "readers"
	AWSRDSRoleAny     AWSRDSRole = "any"
)

// AWSRDSSource reads RDS DB instances: one by identifier, the members of an
// Aurora cluster, or all instances carrying some tags.
// +kubebuilder:validation:XValidation:rule="[has(self.dbInstanceIdentifier), has(self.dbClusterIdentifier), has(self.tags)].filter(x, x).size() == 1",message="spec.sources[].awsRDS: set exactly one of dbInstanceIdentifier, dbClusterIdentifier, tags"
type AWSRDSSource struct {
	// region of the instances, for example eu-west-1.
	// +required
	Region AWSRegion `json:"region"`

	// dbInstanceIdentifier selects one DB instance.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsRDS.dbInstanceIdentifier: an empty identifier selects every DB instance in the region; name one, or use dbClusterIdentifier or tags"
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.size() > 63 || (self.matches('^[a-zA-Z][a-zA-Z0-9-]*$') && !self.endsWith('-') && !self.contains('--'))",message="spec.sources[].awsRDS.dbInstanceIdentifier: an RDS identifier is 1 to 63 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	DBInstanceIdentifier string `json:"dbInstanceIdentifier,omitempty"`

	// dbClusterIdentifier selects the members of an Aurora cluster.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsRDS.dbClusterIdentifier: an empty identifier selects every DB cluster in the region; name one, or use dbInstanceIdentifier or tags"
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || self.size() > 63 || (self.matches('^[a-zA-Z][a-zA-Z0-9-]*$') && !self.endsWith('-') && !self.contains('--'))",message="spec.sources[].awsRDS.dbClusterIdentifier: an RDS identifier is 1 to 63 letters, digits and '-', starting with a letter, not ending with '-' and without '--'"
	DBClusterIdentifier string `json:"dbClusterIdentifier,omitempty"`

	// role picks the writer, the readers or any member of the cluster.
	// +optional
	// +kubebuilder:default=any
	Role AWSRDSRole `json:"role,omitempty"`

	// tags an instance must all carry: at least one.
	// +optional
	// +kubebuilder:validation:MaxProperties=50
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsRDS.tags: an empty map selects every instance in the region; name at least one tag or use dbInstanceIdentifier or dbClusterIdentifier"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() >= 1 && k.size() <= 128 && self[k].size() <= 256)",message="spec.sources[].awsRDS.tags: tag keys are 1 to 128 characters and values at most 256 (AWS's limits)"
	Tags map[string]string `json:"tags,omitempty"`

	// assumeRoleARN is assumed to read the instances; it must be in the
	// controller's --aws-allowed-role-arns.
	// +optional
	AssumeRoleARN string `json:"assumeRoleARN,omitempty"`
}

// AWSEC2AddressKind selects which address of an EC2 instance is published.
// +kubebuilder:validation:Enum=Private;Public
type AWSEC2AddressKind string

// EC2 address kinds.
const (
	AWSEC2AddressPrivate AWSEC2AddressKind = "Private"
	AWSEC2AddressPublic  AWSEC2AddressKind = "Public"
)

// AWSEC2Source reads EC2 instances by ID or tag.
// +kubebuilder:validation:XValidation:rule="has(self.instanceIDs) != has(self.tags)",message="spec.sources[].awsEC2: set exactly one of instanceIDs, tags"
type AWSEC2Source struct {
	// region of the instances, for example eu-west-1.
	// +required
	Region AWSRegion `json:"region"`

	// instanceIDs to publish: at least one.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsEC2.instanceIDs: an empty list selects every instance in the region; list at least one instance ID or use tags"
	// +kubebuilder:validation:items:MaxLength=19
	// +kubebuilder:validation:items:XValidation:rule="self.size() > 19 || self.matches('^i-[0-9a-f]{8}([0-9a-f]{9})?$')",message="spec.sources[].awsEC2.instanceIDs[]: not an EC2 instance ID (i- and 8 or 17 lower-case hex digits, such as i-0123456789abcdef0)"
	InstanceIDs []string `json:"instanceIDs,omitempty"`

	// tags an instance must all carry: at least one.
	// +optional
	// +kubebuilder:validation:MaxProperties=50
	// +kubebuilder:validation:XValidation:rule="self.size() > 0",message="spec.sources[].awsEC2.tags: an empty map selects every instance in the region; name at least one tag or use instanceIDs"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() >= 1 && k.size() <= 128 && self[k].size() <= 256)",message="spec.sources[].awsEC2.tags: tag keys are 1 to 128 characters and values at most 256 (AWS's limits)"
	Tags map[string]string `json:"tags,omitempty"`

	// addressKind is Private (the default) or Public.
	// +optional
	// +kubebuilder:default=Private
	AddressKind AWSEC2AddressKind `json:"addressKind,omitempty"`

	// assumeRoleARN is assumed to read the instances; it must be in the
	// controller's --aws-allowed-role-arns.
	// +optional
	AssumeRoleARN string `json:"assumeRoleARN,omitempty"`
}

// PluginSource is what a plugin source asks its plugin: parameters of the
// plugin's own, which the plugin validates. The plugin is also told the
// namespace and name of the ExternalBackend and the source's name, for its
// own consent rules.
type PluginSource struct {
	// parameters of the plugin (which group, which cluster...), passed as
	// they are: at most 32, keys of 1 to 63 letters, digits, '-', '_' and
	// '.' starting and ending with a letter or digit, values of at most
	// 1024 characters.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() >= 1 && k.size() <= 63 && self[k].size() <= 1024)",message="spec.sources[].plugin.parameters: keys are 1 to 63 characters and values at most 1024"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() > 63 || k.matches('^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'))",message="spec.sources[].plugin.parameters: keys are letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
	Parameters map[string]string `json:"parameters,omitempty"`
}

// ExternalBackendStatus is what the controller observed and did.
type ExternalBackendStatus struct {
	// observedGeneration is the generation whose spec was fully handled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready summarises Resolved and Synced; Stalled is set when
	// the spec or configuration is wrong and retrying will not help.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// serviceName is the Service the controller writes.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`

	// endpoints counts the published endpoints.
	// +optional
	Endpoints EndpointCounts `json:"endpoints,omitempty"`

	// readyEndpoints is endpoints.ready and endpoints.total as "ready/total"
	// (1/2 while one of two drains), for the ENDPOINTS column of kubectl
	// get: a printer column shows one field, as a Deployment's READY 1/2.
	// +optional
	// +kubebuilder:validation:MaxLength=21
	// +kubebuilder:validation:Pattern=`^[0-9]+/[0-9]+$`
	ReadyEndpoints string `json:"readyEndpoints,omitempty"`

	// slices is the number of EndpointSlices the controller manages.
	// +optional
	Slices int32 `json:"slices,omitempty"`

	// sources is the state of each source.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Sources []SourceStatus `json:"sources,omitempty"`

	// dropped lists addresses that were found but not published, with why
	// (at most 20 are listed).
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Dropped []DroppedAddress `json:"dropped,omitempty"`

	// draining lists endpoints that vanished from their source and are kept as
	// terminating until their drain period ends, the first 100 by address;
	// endpoints.terminating counts them all.
	// +optional
	// +listType=map
	// +listMapKey=address
	// +kubebuilder:validation:MaxItems=100
	Draining []DrainingEndpoint `json:"draining,omitempty"`
}

// EndpointCounts counts published endpoints by family and condition.
type EndpointCounts struct {
	// total published endpoints.
	// +optional
	Total int32 `json:"total,omitempty"`
	// ready endpoints (serving and not terminating).
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// serving endpoints, terminating or not.
	// +optional
	Serving int32 `json:"serving,omitempty"`
	// terminating endpoints.
	// +optional
	Terminating int32 `json:"terminating,omitempty"`
	// ipv4 endpoints.
	// +optional
	IPv4 int32 `json:"ipv4,omitempty"`
	// ipv6 endpoints.
	// +optional
	IPv6 int32 `json:"ipv6,omitempty"`
	// fqdn endpoints.
	// +optional
	FQDN int32 `json:"fqdn,omitempty"`
	// notServed counts endpoints not published because the cluster gives
	// Services no cluster IPs of their family (an IPv6 address on an
	// IPv4-only cluster); the Resolved condition names the families.
	// +optional
	NotServed int32 `json:"notServed,omitempty"`
	// probeFailing counts the endpoints their sources call ready that fail
	// their probes (published not ready, unless the backend fails open).
	// +optional
	ProbeFailing int32 `json:"probeFailing,omitempty"`
}

// SourceStatus is the state of one source.
type SourceStatus struct {
	// name of the source in spec.sources.
	Name string `json:"name"`
	// kind of the source: static, dns, consul, awsRDS, awsEC2,
	// awsElastiCache or awsMemoryDB.
	Kind string `json:"kind"`
	// endpoints the source returned on its last success.
	Endpoints int32 `json:"endpoints,omitempty"`
	// lastSuccessTime is when the source last answered, as of the last
	// status write: it is refreshed whenever status is written for another
	// reason, and when the source's answer changes, but never on its own
	// (a timestamp refreshed for its own sake would write the status of
	// every backend at every resync or restart).
	// +optional
	LastSuccessTime *metav1.Time `json:"lastSuccessTime,omitempty"`
	// stale is true when the last attempt failed and the endpoints last known
	// from this source are kept.
	// +optional
	Stale bool `json:"stale,omitempty"`
	// lastError is the last failure, empty after a success.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// DroppedAddress is an address a source found that was not published.
type DroppedAddress struct {
	// source that returned the address.
	Source string `json:"source"`
	// address as the source gave it.
	Address string `json:"address"`
	// reason it was dropped, naming the rule and the fix.
	Reason string `json:"reason"`
}

// DrainingEndpoint is an endpoint kept as terminating after it vanished.
type DrainingEndpoint struct {
	// address of the endpoint.
	Address string `json:"address"`
	// since is when it vanished; it is removed at since + drainPeriod.
	Since metav1.Time `json:"since"`
}

// ExternalBackend publishes a backend outside the cluster as a selectorless
// Service and EndpointSlices that follow its addresses, health and zones.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=xb,categories=backendslice
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name: at most 63 characters, since it is the value of the backendslice.io/backend label on the Service and slices; choose a shorter name"
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.status.serviceName`
// +kubebuilder:printcolumn:name="Endpoints",type=string,JSONPath=`.status.readyEndpoints`,description="Ready endpoints of those published (terminating ones count in the total)"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ExternalBackend struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec describes the backend and its Service.
	// +required
	Spec ExternalBackendSpec `json:"spec"`

	// status is written by the controller. It defaults to observedGeneration
	// 0 so that kstatus reads a new object as InProgress, not Current.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status ExternalBackendStatus `json:"status,omitempty"`
}

// ExternalBackendList is a list of ExternalBackends.
//
// +kubebuilder:object:root=true
type ExternalBackendList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExternalBackend `json:"items"`
}
