package aws

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
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
// what the source reads. Its message goes on the backend's status and
// Events, which the backend's tenant reads: AWS's own text is redacted
// there (see redact), and the failure unwraps to the full one, which the
// session logs when the listing fails (cachedListing.list).
func classify(err error, field, action string, t target) error {
	region := t.id.region
	var pe *providers.Error
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return providers.Transient(tellf(err, "%s: %s in %s did not finish: %s", field, action, region, tenantText(err)))
	}
	switch refusal(err) {
	case v1alpha1.ReasonAccessDenied:
		if errors.As(err, new(*credentialsError)) {
			// STS refused the role: its trust policy is what to fix.
			return providers.Terminal(v1alpha1.ReasonAccessDenied, tellf(err,
				"%s: AWS refused the credentials of %s for %s in %s (%s); the role's trust policy must let the controller assume it",
				field, t.whose, action, region, tenantText(err)))
		}
		return providers.Terminal(v1alpha1.ReasonAccessDenied, tellf(err,
			"%s: AWS refused %s in %s (%s); grant %s permission to call it",
			field, action, region, tenantText(err), t.whose))
	case v1alpha1.ReasonNoCredentials:
		return providers.Terminal(v1alpha1.ReasonNoCredentials, tellf(err,
			"%s: no AWS credentials to call %s in %s: %s; give the controller credentials (IRSA, AWS_* environment, instance profile)",
			field, action, region, tenantText(err)))
	}
	// Throttling that outlasted the SDK's retries, network errors, 5xx.
	return providers.Transient(tellf(err, "%s: %s in %s failed: %s", field, action, region, tenantText(err)))
}

// told is a failure whose text is what a backend's tenant may read, and
// which unwraps to the full failure: errors.As still finds AWS's answer in
// it, and the controller's log has all of it.
type told struct {
	text string
	err  error
}

func (e *told) Error() string { return e.text }
func (e *told) Unwrap() error { return e.err }

// tellf is err, told as format and args say.
func tellf(err error, format string, args ...any) error {
	return &told{text: fmt.Sprintf(format, args...), err: err}
}

// tenantText is what a tenant may read of an AWS failure: AWS's error code
// and its message, redacted, where AWS answered (after how many attempts,
// when the SDK's retries ran out); else the SDK's text, redacted. The
// SDK's own wrapping (operation, status code, request ID) is left out: a
// request ID is new on every call, and would make the status change at
// every retry.
func tenantText(err error) string {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return redact(err.Error())
	}
	text := api.ErrorCode() + ": " + redact(api.ErrorMessage())
	if api.ErrorMessage() == "" {
		text = api.ErrorCode()
	}
	var attempts *retry.MaxAttemptsError
	if errors.As(err, &attempts) {
		text = fmt.Sprintf("%s (after %d attempts)", text, attempts.Attempt)
	}
	return text
}

// What redact takes out of AWS's text.
var (
	// arnText is an ARN of any partition (aws, aws-cn, aws-us-gov, ...),
	// up to the first character that no ARN holds but that ends a word in
	// a sentence.
	arnText = regexp.MustCompile(`arn:aws[a-z-]*:[^\s"'<>(),;]*`)
	// principalText is an IAM principal's name outside an ARN:
	// assumed-role/<role>/<session>, role/<name>, user/<name>.
	principalText = regexp.MustCompile(`\b(assumed-role|federated-user|role|user)/[\w+=,.@/-]+`)
	// accountText is an AWS account ID: twelve digits.
	accountText = regexp.MustCompile(`\b[0-9]{12}\b`)
	// keyIDText is an access key ID or an IAM unique ID (AKIA..., ASIA...,
	// AROA..., AIDA...), which AWS names in signature failures.
	keyIDText = regexp.MustCompile(`\b(AKIA|ASIA|AROA|AIDA|AGPA|ANPA|ANVA|APKA|AIPA)[A-Z0-9]{12,}\b`)
	// encodedText is the blob EC2 appends to UnauthorizedOperation: the
	// whole request's context, readable with sts:DecodeAuthorizationMessage.
	encodedText = regexp.MustCompile(`(?i)\s*Encoded authorization failure message:\s*\S+`)
	// requestIDText is the SDK's or S3's request and host IDs.
	requestIDText = regexp.MustCompile(`(?i)\b(RequestID|HostID|request id):\s*[^\s,]*,?\s*`)
)

// redact takes out of text what names the AWS account and its identities
// (ARNs, principal names, account IDs, access key IDs), EC2's encoded
// authorization message and request IDs, leaving what failed and why:
// "User: <redacted ARN> is not authorized to perform: rds:DescribeDBInstances
// on resource: <redacted ARN>". Only the controller's log has them.
func redact(text string) string {
	text = encodedText.ReplaceAllString(text, "")
	text = requestIDText.ReplaceAllString(text, "")
	text = arnText.ReplaceAllStringFunc(text, func(arn string) string {
		// A sentence's full stop is not the ARN's.
		return "<redacted ARN>" + arn[len(strings.TrimRight(arn, ".")):]
	})
	text = principalText.ReplaceAllString(text, "<redacted principal>")
	text = keyIDText.ReplaceAllString(text, "<redacted key ID>")
	return accountText.ReplaceAllString(text, "<redacted account>")
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
