package v1alpha1

// Condition types on ExternalBackend status.
const (
	// ConditionReady summarises Resolved and Synced; kstatus and Argo CD read it.
	ConditionReady = "Ready"
	// ConditionResolved tells whether every source answered.
	ConditionResolved = "Resolved"
	// ConditionSynced tells whether the Service and EndpointSlices match what was resolved.
	ConditionSynced = "Synced"
	// ConditionProbed is present when endpoints are probed: True when the
	// probes' verdicts are applied, False when none can be (fail-open, or
	// a probe that cannot run). It does not change Ready.
	ConditionProbed = "Probed"
	// ConditionAdopted is present when spec.service.adopt is set: True once
	// the Service is this backend's and none of its hand-written slices
	// (nor a legacy Endpoints object) is left, False while one waits for
	// this backend's slices to carry its ready endpoints.
	ConditionAdopted = "Adopted"
	// ConditionStalled is True when the spec or the controller's configuration
	// is wrong and retrying will not help until one of them changes. On a
	// BackendProvider it is True whenever Ready is False, with Ready's
	// reason and message: each of those waits on someone else. kstatus
	// reads it as Failed.
	ConditionStalled = "Stalled"
	// ConditionReconciling is True while a change is part way through and
	// the controller is moving it on by itself (ReasonAdopting), and absent
	// otherwise. It is kstatus's condition for progress (abnormal-true,
	// like Stalled): kstatus-based tools read it as InProgress, the Argo CD
	// health check as Progressing.
	ConditionReconciling = "Reconciling"
)

// Condition reasons. Each is CamelCase, as metav1.Condition requires.
const (
	// ReasonReady: every source resolved and the Service and slices are in sync.
	ReasonReady = "Ready"
	// ReasonResolved: every source answered.
	ReasonResolved = "Resolved"
	// ReasonSynced: the Service and EndpointSlices match what was resolved.
	ReasonSynced = "Synced"
	// ReasonSuspended: spec.suspend is true; nothing is resolved or written.
	ReasonSuspended = "Suspended"

	// ReasonInvalidSpec: the spec cannot be handled as written; the message names the field.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonProviderNotAvailable: no provider for the source's kind is built into this controller.
	ReasonProviderNotAvailable = "ProviderNotAvailable"
	// ReasonSourceFailed: a source failed; its last known endpoints are kept.
	ReasonSourceFailed = "SourceFailed"
	// ReasonBackendNotFound: the backend a source names does not exist (NXDOMAIN,
	// a deleted instance); what it published drains.
	ReasonBackendNotFound = "BackendNotFound"
	// ReasonAccessDenied: the cloud provider refused the controller's
	// identity, or the source asks for a role the controller may not assume.
	ReasonAccessDenied = "AccessDenied"
	// ReasonNoCredentials: the controller found no cloud credentials.
	ReasonNoCredentials = "NoCredentials"
	// ReasonAddressesDropped: some addresses were not published; status.dropped says why.
	ReasonAddressesDropped = "AddressesDropped"
	// ReasonFamilyNotServed: endpoints of an IP family the cluster gives
	// Services no addresses of were not published; status.endpoints.notServed counts them.
	ReasonFamilyNotServed = "FamilyNotServed"

	// ReasonProviderNotAdmitted: a source names a BackendProvider that does
	// not exist, is of another kind, does not admit the namespace or the
	// service, or names none where the controller requires one; nothing
	// is published for it, and what it published is withdrawn.
	ReasonProviderNotAdmitted = "ProviderNotAdmitted"

	// ReasonProbesPassing: the probes' verdicts are applied; endpoints
	// failing their probes are published not ready.
	ReasonProbesPassing = "ProbesPassing"
	// ReasonFailOpen: every endpoint the sources call ready fails its probe,
	// so they are published as the sources say (probe.failOpen).
	ReasonFailOpen = "FailOpen"
	// ReasonProbesFailing: every probed endpoint fails and failOpen is
	// false: none is ready.
	ReasonProbesFailing = "ProbesFailing"
	// ReasonProbeUnavailable: a probe cannot run (its CA Secret is
	// missing, or its path is outside what admission now allows); that
	// source's endpoints are published as it says.
	ReasonProbeUnavailable = "ProbeUnavailable"
	// ReasonProbePortNotAllowed: a probe names a port that is neither a
	// target port of the backend's Service nor allowed for probes by every
	// BackendProvider of the endpoint (spec.probes.allowedPorts); no probe
	// is sent there, and those endpoints are published as their sources say.
	ReasonProbePortNotAllowed = "ProbePortNotAllowed"

	// ReasonServiceConflict: a Service of that name exists that this ExternalBackend does not own.
	ReasonServiceConflict = "ServiceConflict"
	// ReasonAdoptionRefused: spec.service.adopt is set, but the Service of
	// that name cannot be adopted (a selector, another controller's, a type
	// or family that would change its cluster IP).
	ReasonAdoptionRefused = "AdoptionRefused"
	// ReasonAdopted: the Service is this backend's and only its slices are left.
	ReasonAdopted = "Adopted"
	// ReasonAdopting: hand-written slices or a legacy Endpoints object wait
	// until this backend's slices carry their ready endpoints (on Adopted,
	// and on Reconciling while it lasts).
	ReasonAdopting = "Adopting"
	// ReasonWriteFailed: writing the Service or an EndpointSlice failed; it is retried.
	ReasonWriteFailed = "WriteFailed"
	// ReasonReadFailed: reading the Service, the EndpointSlices or the
	// cluster's ServiceCIDRs failed; it is retried.
	ReasonReadFailed = "ReadFailed"
)

// Reasons of a BackendProvider's Ready condition, and of its Stalled
// condition while Ready is False.
const (
	// ReasonProviderReady: the provider's settings and Secrets can be used
	// and, for a kind with a connection (consul, aws, dns), its connection
	// answered its checks.
	ReasonProviderReady = "Ready"
	// ReasonSecretNotFound: a Secret (or a key of it) the provider names is
	// missing from the controller's namespace.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonInvalidProvider: a setting cannot be used as written (a CA
	// that is not PEM, a selector that does not parse).
	ReasonInvalidProvider = "InvalidProvider"
	// ReasonConnectionFailed: the provider's settings and Secrets can be
	// used, but its connection check failed several times in a row (the
	// Consul agent, STS or a DNS resolver did not answer, or refused the
	// identity); the message names the address and the error. Sources
	// through it are still resolved, each reporting its own failures.
	ReasonConnectionFailed = "ConnectionFailed"
	// ReasonUnsupportedProtocol: the provider's plugin answers, but speaks
	// no version of the plugin protocol this controller speaks; the message
	// names both. It is said at the first check, not after several: it is
	// no passing fault.
	ReasonUnsupportedProtocol = "UnsupportedProtocol"
)
