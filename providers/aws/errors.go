package aws

import (
	"context"
	"errors"
	"fmt"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// deniedCodes are AWS error codes saying the identity may not make the
// call: retrying does not help until the IAM policy or the configuration
// changes.
var deniedCodes = map[string]bool{
	"AccessDenied":                true,
	"AccessDeniedException":       true,
	"UnauthorizedOperation":       true,
	"AuthFailure":                 true,
	"InvalidClientTokenId":        true,
	"UnrecognizedClientException": true,
	"SignatureDoesNotMatch":       true,
	"OptInRequired":               true,
}

// classify turns a listing's failure into the providers.Error of one
// source: field is the source's path in the spec, action the AWS call, t
// what the source reads.
func classify(err error, field, action string, t target) error {
	region := t.id.region
	var pe *providers.Error
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return providers.Transient(fmt.Errorf("%s: %s in %s did not finish: %w", field, action, region, err))
	}
	switch refusal(err) {
	case v1alpha1.ReasonAccessDenied:
		var api smithy.APIError
		errors.As(err, &api)
		if errors.As(err, new(*credentialsError)) {
			// STS refused the role: its trust policy is what to fix.
			return providers.Terminal(v1alpha1.ReasonAccessDenied, fmt.Errorf(
				"%s: AWS refused the credentials of %s for %s in %s (%s: %s); the role's trust policy must let the controller assume it",
				field, t.whose, action, region, api.ErrorCode(), api.ErrorMessage()))
		}
		return providers.Terminal(v1alpha1.ReasonAccessDenied, fmt.Errorf(
			"%s: AWS refused %s in %s (%s: %s); grant %s permission to call it",
			field, action, region, api.ErrorCode(), api.ErrorMessage(), t.whose))
	case v1alpha1.ReasonNoCredentials:
		return providers.Terminal(v1alpha1.ReasonNoCredentials, fmt.Errorf(
			"%s: no AWS credentials to call %s in %s: %w; give the controller credentials (IRSA, AWS_* environment, instance profile)",
			field, action, region, err))
	}
	// Throttling that outlasted the SDK's retries, network errors, 5xx.
	return providers.Transient(fmt.Errorf("%s: %s in %s failed: %w", field, action, region, err))
}

// refusal is v1alpha1.ReasonAccessDenied when AWS refused the identity,
// v1alpha1.ReasonNoCredentials when there were no credentials to call with, and ""
// for any other failure.
func refusal(err error) string {
	var api smithy.APIError
	isAPI := errors.As(err, &api)
	if isAPI && deniedCodes[api.ErrorCode()] {
		return v1alpha1.ReasonAccessDenied
	}
	// A credentials failure without an AWS answer in it (an STS throttle
	// would be one) means there are none to use.
	var creds *credentialsError
	if errors.As(err, &creds) && !isAPI {
		return v1alpha1.ReasonNoCredentials
	}
	return ""
}

// stoppedEarly is the failure of a listing whose last page, last, still
// names a next page. The paginators stop when AWS hands back the token they
// just sent (StopOnDuplicateToken) instead of asking for the same page until
// the fetch timeout, and that is the only way they stop with a token left.
// The pages read are then part of the region only: publishing them would
// drain every instance on the pages never read, so the listing fails as
// transient and the controller keeps the last known endpoints.
func stoppedEarly(last *string) error {
	if token := awssdk.ToString(last); token != "" {
		return fmt.Errorf("the pagination token %q repeated: AWS answered the page it names with the same token, so the listing stopped before its end and is not used", token)
	}
	return nil
}
