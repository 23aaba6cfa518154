package aws

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// CheckConnection asks STS who the identity of cc is (GetCallerIdentity),
// at the endpoint and in the region sources through cc use, as the role
// cc names, assumed first through STS AssumeRole as sources assume it.
// GetCallerIdentity needs no IAM permission (AWS always allows it), and
// AssumeRole needs only the role's trust in the controller, which sources
// need anyway: the check proves that the endpoint answers, that the
// controller's credentials are good and that the role can be assumed.
// What the identity may describe is each source's to find out. Each
// check assumes the role afresh (one AssumeRole and one
// GetCallerIdentity), and tries each call once: the checks' own schedule
// retries.
func (s *Session) CheckConnection(ctx context.Context, cc *providers.Connection) error {
	if settingsOf(cc) == nil {
		return providers.Terminalf(v1alpha1.ReasonInvalidSpec, "no AWS connection to check")
	}
	t, err := s.targetOf("spec.aws", "", "", providers.Request{Connection: cc})
	if err != nil {
		return err
	}
	once := func(o *sts.Options) { o.RetryMaxAttempts = 1 }
	client := sts.NewFromConfig(s.configOf(t.id, once), once,
		func(o *sts.Options) { o.BaseEndpoint = endpointOf(t.id.stsEndpoint) })
	if _, err := client.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}); err != nil {
		where := t.id.stsEndpoint
		if where == "" {
			where = "the public STS endpoint of " + t.id.region
		}
		// The BackendProvider's status is the platform team's: AWS's text
		// and the role's ARN are told whole there, unlike on a backend's.
		as := t.whose
		if role := settingsOf(cc).AssumeRoleARN; role != "" {
			as = "role " + role + " of BackendProvider " + cc.Name
		}
		return fmt.Errorf("AWS STS at %s, as %s: %s", where, as, stsFailure(err))
	}
	return nil
}

// stsFailure says in short what STS answered, and to which call: the
// SDK's error nests the AssumeRole that failed inside the
// GetCallerIdentity that needed its credentials, and a status message
// has room for AWS's answer, not for the nesting.
func stsFailure(err error) string {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return err.Error()
	}
	if errors.As(err, new(*credentialsError)) {
		return fmt.Sprintf("AssumeRole: %s: %s; the role's trust policy must let the controller assume it", api.ErrorCode(), api.ErrorMessage())
	}
	return fmt.Sprintf("GetCallerIdentity: %s: %s", api.ErrorCode(), api.ErrorMessage())
}
