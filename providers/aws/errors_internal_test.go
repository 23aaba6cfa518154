package aws

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// sdkError is a failure as the SDK's clients return one: the operation,
// wrapping the HTTP response's error (status and request ID), wrapping
// err (AWS's answer, or a failure to send).
func sdkError(service, operation string, status int, err error) error {
	return &smithy.OperationError{ServiceID: service, OperationName: operation, Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: err},
		RequestID:     "5d7ca2b3-0c8e-4f7b-9a57-6f0e3b1f2a9c",
	}}
}

// answer is AWS's answer with code and message, as the SDK decodes it.
func answer(code, message string) error { return &smithy.GenericAPIError{Code: code, Message: message} }

// TestTenantText: what a tenant reads of AWS's failures, in the shapes the
// SDK returns them, keeps AWS's error code and what failed, and holds no
// account ID, ARN, principal name, access key ID, request ID or EC2's
// encoded authorization message.
func TestTenantText(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{
			name: "RDS AccessDenied naming the assumed role and the resource",
			err: sdkError("RDS", "DescribeDBInstances", 403, answer("AccessDenied",
				"User: arn:aws:sts::123456789012:assumed-role/backendslice-controller/i-0abc is not authorized to perform: rds:DescribeDBInstances on resource: arn:aws:rds:eu-west-1:123456789012:db:*")),
			want: "AccessDenied: User: <redacted ARN> is not authorized to perform: rds:DescribeDBInstances on resource: <redacted ARN>",
		},
		{
			name: "a sentence's full stop after an ARN stays",
			err: sdkError("ElastiCache", "ListTagsForResource", 403, answer("AccessDenied",
				"User: arn:aws:sts::123456789012:assumed-role/reader/backendslice is not authorized to perform: elasticache:ListTagsForResource on resource: arn:aws:elasticache:eu-west-1:123456789012:replicationgroup:orders.")),
			want: "AccessDenied: User: <redacted ARN> is not authorized to perform: elasticache:ListTagsForResource on resource: <redacted ARN>.",
		},
		{
			name: "EC2 UnauthorizedOperation with its encoded authorization message",
			err: sdkError("EC2", "DescribeInstances", 403, answer("UnauthorizedOperation",
				"You are not authorized to perform this operation. User: arn:aws:sts::123456789012:assumed-role/Reader/sess is not authorized to perform: ec2:DescribeInstances because no identity-based policy allows the ec2:DescribeInstances action. Encoded authorization failure message: Q2xhc3NpZmllZCBpbmZvcm1hdGlvbiBhYm91dCB0aGUgcmVxdWVzdA")),
			want: "UnauthorizedOperation: You are not authorized to perform this operation. User: <redacted ARN> is not authorized to perform: ec2:DescribeInstances because no identity-based policy allows the ec2:DescribeInstances action.",
		},
		{
			name: "other partitions, and a role with a path",
			err: sdkError("STS", "AssumeRole", 403, answer("AccessDenied",
				"User: arn:aws-cn:sts::210987654321:assumed-role/ctl/x is not authorized to perform: sts:AssumeRole on resource: arn:aws-us-gov:iam::123456789012:role/team/db-reader")),
			want: "AccessDenied: User: <redacted ARN> is not authorized to perform: sts:AssumeRole on resource: <redacted ARN>",
		},
		{
			name: "principal names, account IDs and access key IDs outside ARNs",
			err: sdkError("RDS", "DescribeDBClusters", 403, answer("InvalidClientTokenId",
				"The security token of assumed-role/backendslice/i-0abc in account 123456789012 (key AKIAIOSFODNN7EXAMPLE, role AROA3XFRBF535PLBIFPI4) is invalid")),
			want: "InvalidClientTokenId: The security token of <redacted principal> in account <redacted account> (key <redacted key ID>, role <redacted key ID>) is invalid",
		},
		{
			name: "throttling after the SDK's attempts",
			err: &smithy.OperationError{ServiceID: "RDS", OperationName: "DescribeDBInstances", Err: &retry.MaxAttemptsError{Attempt: 5,
				Err: &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 400}},
					Err: answer("Throttling", "Rate exceeded")}, RequestID: "5d7ca2b3"}}},
			want: "Throttling: Rate exceeded (after 5 attempts)",
		},
		{
			name: "a code without a message",
			err:  sdkError("MemoryDB", "ListTags", 400, answer("AccessDeniedException", "")),
			want: "AccessDeniedException",
		},
		{
			name: "no answer: the request was not sent",
			err: &smithy.OperationError{ServiceID: "RDS", OperationName: "DescribeDBInstances", Err: &awshttp.ResponseError{
				ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{}},
					Err: &smithyhttp.RequestSendError{Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}},
				RequestID: "",
			}},
			want: "operation error RDS: DescribeDBInstances, https response error StatusCode: 0, request send failed, dial tcp: connect: connection refused",
		},
		{
			name: "no answer, with a request ID",
			err:  sdkError("RDS", "DescribeDBInstances", 500, errors.New("failed to decode response body")),
			want: "operation error RDS: DescribeDBInstances, https response error StatusCode: 500, failed to decode response body",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := tenantText(c.err)
			if got != c.want {
				t.Errorf("tenantText:\n got %q\nwant %q", got, c.want)
			}
			for _, secret := range []string{"123456789012", "210987654321", "arn:", "backendslice-controller", "i-0abc", "AKIA", "AROA", "5d7ca2b3", "Q2xhc3"} {
				if strings.Contains(got, secret) {
					t.Errorf("tenantText %q holds %q", got, secret)
				}
			}
		})
	}
}

// TestClassifyTellsRedacted: classify's failures read redacted, keep
// their reason, and unwrap to AWS's whole answer, which the log has.
func TestClassifyTellsRedacted(t *testing.T) {
	const message = "User: arn:aws:sts::123456789012:assumed-role/ctl/x is not authorized to perform: rds:DescribeDBInstances"
	src := sdkError("RDS", "DescribeDBInstances", 403, answer("AccessDenied", message))
	tgt := target{id: identity{region: "eu-west-1"}, whose: "the role of BackendProvider shared"}
	for _, c := range []struct {
		name     string
		err      error
		terminal bool
		reason   string
		want     string
	}{
		{"refused", src, true, v1alpha1.ReasonAccessDenied,
			"spec.sources[db].awsRDS: AWS refused rds:DescribeDBInstances in eu-west-1 (AccessDenied: User: <redacted ARN> is not authorized to perform: rds:DescribeDBInstances); grant the role of BackendProvider shared permission to call it"},
		{"refused to assume the role", &credentialsError{src}, true, v1alpha1.ReasonAccessDenied,
			"spec.sources[db].awsRDS: AWS refused the credentials of the role of BackendProvider shared for rds:DescribeDBInstances in eu-west-1 (AccessDenied: User: <redacted ARN> is not authorized"},
		{"no credentials", &credentialsError{errors.New("no EC2 IMDS role found for arn:aws:iam::123456789012:role/node")}, true, v1alpha1.ReasonNoCredentials,
			"no AWS credentials to call rds:DescribeDBInstances in eu-west-1: no EC2 IMDS role found for <redacted ARN>; give the controller credentials"},
		{"throttled", sdkError("RDS", "DescribeDBInstances", 400, answer("Throttling", "Rate exceeded")), false, v1alpha1.ReasonSourceFailed,
			"spec.sources[db].awsRDS: rds:DescribeDBInstances in eu-west-1 failed: Throttling: Rate exceeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := classify(c.err, "spec.sources[db].awsRDS", "rds:DescribeDBInstances", tgt)
			pe := providers.AsError(err)
			if pe.Terminal != c.terminal || pe.Reason != c.reason || !strings.Contains(err.Error(), c.want) {
				t.Errorf("classify: (terminal=%v, %s) %q, want (terminal=%v, %s) containing %q", pe.Terminal, pe.Reason, err, c.terminal, c.reason, c.want)
			}
			if strings.Contains(err.Error(), "123456789012") || strings.Contains(err.Error(), "RequestID") {
				t.Errorf("classify: %q names the account or the request", err)
			}
			if !errors.Is(err, c.err) {
				t.Errorf("classify: %v does not unwrap to AWS's whole failure", err)
			}
		})
	}
}
