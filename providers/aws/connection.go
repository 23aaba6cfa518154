package aws

import (
	"errors"
	"fmt"
	"strings"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// target is what one source reads: the identity it calls AWS as, whose
// permissions those are, and the consent its backends must give.
type target struct {
	id identity
	// whose names the identity's permissions in messages: who must fix a
	// refusal.
	whose string
	// consentTag, when set, is the tag whose comma-separated value must
	// list namespace for an instance or cluster to be published.
	consentTag, namespace string
}

// targetOf checks a source's region and assumeRoleARN, of the request's
// BackendProvider when it names one and of the controller's flags
// otherwise, and returns what the source reads. field is the source's path
// in the spec. It makes no AWS call.
func (s *Session) targetOf(field, region, role string, req providers.Request) (target, error) {
	cc := req.Connection
	if cc == nil {
		if role != "" && !s.allowed[role] {
			return target{}, providers.Terminalf(v1alpha1.ReasonAccessDenied,
				"%s.assumeRoleARN: %s is not in the controller's --aws-allowed-role-arns; remove assumeRoleARN to use the controller's own credentials, or ask the controller's operators to allow the role",
				field, role)
		}
		whose := "the controller's role"
		if role != "" {
			whose = "role " + role
		}
		return target{id: identity{role: role, region: region, endpoint: s.endpoint}, whose: whose}, nil
	}
	provider := "BackendProvider " + cc.Name
	conn := settingsOf(cc)
	switch {
	case conn == nil:
		return target{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s is not an AWS connection; name an AWS BackendProvider in providerRef", provider)
	case role != "":
		return target{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s.assumeRoleARN: a source through %s reads as that provider's role; remove assumeRoleARN, and set the role in the BackendProvider",
			field, provider)
	case conn.AssumeRoleARN != "" && !isRoleARN(conn.AssumeRoleARN):
		return target{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s: %q is not an IAM role ARN such as arn:aws:iam::123456789012:role/name", provider, conn.AssumeRoleARN)
	case conn.Region != "" && region != "" && region != conn.Region:
		return target{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s.region: %s, but %s serves %s; write %s or use another provider", field, region, provider, conn.Region, conn.Region)
	}
	// A provider that names no region serves the one the source names.
	if conn.Region != "" {
		region = conn.Region
	}
	if region == "" {
		return target{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec,
			"%s.region: empty, and %s names no region; write the region of the instances", field, provider)
	}
	whose := "the controller's role, as " + provider + " names none"
	if conn.AssumeRoleARN != "" {
		// The platform team wrote the role into the BackendProvider, and
		// the controller admitted the namespace: no allow-list applies.
		// Its ARN names the account, which the namespace's tenant reads
		// no more than AWS's text (see redact): the platform team knows
		// which role its provider names.
		whose = "the role of " + provider
	}
	return target{
		// The provider's endpoint replaces all three, STS included, so
		// that the role is assumed where the account is read; without one
		// the public endpoints are used, since --aws-endpoint-url belongs
		// to the controller's own account and region.
		id:         identity{role: conn.AssumeRoleARN, region: region, endpoint: conn.EndpointURL, stsEndpoint: conn.EndpointURL},
		whose:      whose,
		consentTag: conn.ConsentTag,
		namespace:  req.Namespace,
	}, nil
}

// consents tells whether a backend with tags may be published in the
// target's namespace: always without a consent tag, else when the tag's
// value lists the namespace (comma-separated, spaces around names ignored).
func (t target) consents(tags map[string]string) bool {
	if t.consentTag == "" {
		return true
	}
	value, ok := tags[t.consentTag]
	if !ok {
		return false
	}
	for name := range strings.SplitSeq(value, ",") {
		if strings.TrimSpace(name) == t.namespace {
			return true
		}
	}
	return false
}

// refused is the failure of a source that names backends (what: "DB
// instance", "EC2 instance") which do not consent to the target's
// namespace, or do not exist: with a consent tag, both say the same, so
// that a tenant cannot tell another tenant's database from none and list
// the account's backends by name. It is gone as well as denied, so that
// what they published drains: an owner who takes a namespace out of the
// tag withdraws the backend from it.
func (t target) refused(field, what string, names ...string) error {
	return providers.Gone(v1alpha1.ReasonAccessDenied, errors.New(t.refusal(field, what, names...)))
}

// unconfirmed is the failure of a source whose backend's consent could not
// be read (cause: its tag call failed, a missing permission or
// throttling): it reads as refused says, word for word, and fails as it
// does (the source's endpoints drain; it is asked again as refusals are),
// since telling it apart would tell a tenant that the backend exists, and
// publishing without a consent read would be the worse mistake. It
// unwraps to cause, which the log has.
func (t target) unconfirmed(cause error, field, what string, names ...string) error {
	return providers.Gone(v1alpha1.ReasonAccessDenied, &told{text: t.refusal(field, what, names...), err: cause})
}

// refusal is the message of refused and unconfirmed.
func (t target) refusal(field, what string, names ...string) string {
	be, have := "is", "has"
	if len(names) > 1 {
		what, be, have = what+"s", "are", "have"
	}
	return fmt.Sprintf(
		"%s: %s %s %s not found in %s or %s no tag %s naming namespace %s: its owner must add the namespace to the tag (%s=%s,...) before it can be published here",
		field, what, strings.Join(names, ", "), be, t.id.region, have, t.consentTag, t.namespace, t.consentTag, t.namespace)
}
