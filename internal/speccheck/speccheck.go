// Package speccheck runs the controller's own checks of an ExternalBackend's
// spec, those that end in InvalidSpec on status: the reconciler runs them
// before anything else, and `backendslice validate` and `render` run the
// same offline.
package speccheck

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-playground/validator/v10"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/internal/publish"
	"github.com/backendslice/backendslice/providers"
)

// specRules are the checks admission cannot make: they depend on the
// object's name or on values a CRD schema does not type (durations). The
// negative drain period and what the kinds' own checks refuse (the empty
// AWS selectors, see sourceChecks) are refused by admission too; they are
// checked here again for objects stored before those rules existed, which
// the API server lets through unchanged.
type specRules struct {
	ServiceName string `validate:"dns1035"`
	DrainPeriod int64  `validate:"gte=0"`
}

// newValidator builds the validator with the Kubernetes name rule.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	// Registering a fixed, valid tag cannot fail.
	_ = v.RegisterValidation("dns1035", func(fl validator.FieldLevel) bool {
		return len(validation.IsDNS1035Label(fl.Field().String())) == 0
	})
	return v
}

// Checker runs the checks.
type Checker struct{ validate *validator.Validate }

// New builds the checker; it is safe for concurrent use.
func New() Checker { return Checker{validate: newValidator()} }

// Problems are the messages of the checks xb fails, each starting with the
// field it names and saying the fix; none when the spec can be handled.
// Each source is checked by its row of kinds, and each DNS name looked up
// against the cluster's DNS domain (clusterDomain, the controller's
// --cluster-domain), which the CRD's rules cannot know.
func (c Checker) Problems(kinds providers.Kinds, clusterDomain string, xb *v1alpha1.ExternalBackend) ([]string, error) {
	rules := specRules{ServiceName: ServiceName(xb)}
	if xb.Spec.DrainPeriod != nil {
		rules.DrainPeriod = int64(xb.Spec.DrainPeriod.Duration)
	}
	var invalid validator.ValidationErrors
	if err := c.validate.Struct(rules); err != nil && !errors.As(err, &invalid) {
		return nil, err
	}
	var msgs []string
	for _, fe := range invalid {
		switch fe.Field() {
		case "ServiceName":
			msgs = append(msgs, fmt.Sprintf(
				"spec.service.name: %q is not a valid Service name (a DNS-1035 label: lower-case letters, digits and '-', starting with a letter, at most 63 characters); it defaults to metadata.name, so set spec.service.name",
				rules.ServiceName))
		case "DrainPeriod":
			msgs = append(msgs, fmt.Sprintf("spec.drainPeriod: %s is negative; use 0s or more", xb.Spec.DrainPeriod.Duration))
		}
	}
	msgs = append(msgs, sourceChecks(kinds, xb)...)
	return append(msgs, lookupNameChecks(clusterDomain, xb)...), nil
}

// Err returns an error naming the field and the fix, or nil: the problems
// c finds, in one message.
func (c Checker) Err(kinds providers.Kinds, clusterDomain string, xb *v1alpha1.ExternalBackend) error {
	msgs, err := c.Problems(kinds, clusterDomain, xb)
	if err != nil || len(msgs) == 0 {
		return err
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// sourceChecks are the messages of the checks of each source's row in
// kinds: for the built-in kinds, the AWS sources that select nothing,
// which the providers read as "no filter", every instance in the region.
func sourceChecks(kinds providers.Kinds, xb *v1alpha1.ExternalBackend) []string {
	var msgs []string
	for _, src := range xb.Spec.Sources {
		if msg := kinds.Check(src); msg != "" {
			msgs = append(msgs, msg)
		}
	}
	return msgs
}

// lookupNameChecks names the DNS sources whose name points back into the
// cluster under its configured domain: the CRD refuses cluster.local and
// .svc names, but a cluster with --cluster-domain corp.test would
// otherwise look up db.payments.svc.corp.test and publish another
// namespace's Pod addresses.
func lookupNameChecks(clusterDomain string, xb *v1alpha1.ExternalBackend) []string {
	var msgs []string
	for _, src := range xb.Spec.Sources {
		if src.DNS == nil {
			continue
		}
		name := publish.CanonicalName(src.DNS.Name)
		if reason := publish.ClusterNameReason(name, clusterDomain); reason != "" {
			msgs = append(msgs, fmt.Sprintf("spec.sources[%s].dns.name: %q %s; name the outside backend", src.Name, src.DNS.Name, reason))
		}
	}
	return msgs
}

// ServiceName is the name of xb's Service: spec.service.name, or else the
// backend's own.
func ServiceName(xb *v1alpha1.ExternalBackend) string {
	if xb.Spec.Service.Name != "" {
		return xb.Spec.Service.Name
	}
	return xb.Name
}
