package framework

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	awsprovider "github.com/backendslice/backendslice/providers/aws"
	"github.com/backendslice/backendslice/test/awstest"
)

// AWS is the controller's AWS session against fake, with the fake's
// example credentials, a listing at most refresh old, failed listings held
// for half of that, and one quick retry.
func AWS(fake *awstest.Server, refresh time.Duration) (*awsprovider.Session, error) {
	return awsprovider.New(context.Background(), awsprovider.Options{
		EndpointURL:     fake.URL,
		Credentials:     credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""),
		Resolver:        fake,
		RefreshInterval: refresh,
		ErrorHold:       refresh / 2,
		MaxAttempts:     2,
		MaxBackoff:      10 * time.Millisecond,
	})
}
