package externalbackend

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-playground/validator/v10"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// specRules are the checks admission cannot make: they depend on the
// object's name or on values a CRD schema does not type (durations). The
// negative drain period and the empty AWS selectors (emptySelectors) are
// refused by admission too; they are checked here again for objects stored
// before those rules existed, which the API server lets through unchanged.
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

// validateSpec returns an error naming the field and the fix, or nil.
func validateSpec(v *validator.Validate, xb *v1alpha1.ExternalBackend) error {
	rules := specRules{ServiceName: serviceName(xb)}
	if xb.Spec.DrainPeriod != nil {
		rules.DrainPeriod = int64(xb.Spec.DrainPeriod.Duration)
	}
	var invalid validator.ValidationErrors
	if err := v.Struct(rules); err != nil && !errors.As(err, &invalid) {
		return err
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
	msgs = append(msgs, emptySelectors(xb)...)
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// emptySelectors names the AWS sources that select nothing: the providers
// read an empty selector as "no filter", every instance in the region.
func emptySelectors(xb *v1alpha1.ExternalBackend) []string {
	var msgs []string
	for _, src := range xb.Spec.Sources {
		switch {
		case src.AWSEC2 != nil && len(src.AWSEC2.InstanceIDs) == 0 && len(src.AWSEC2.Tags) == 0:
			msgs = append(msgs, fmt.Sprintf(
				"spec.sources[%s].awsEC2: no instance IDs and no tags would select every instance in %s; list instance IDs or name at least one tag",
				src.Name, src.AWSEC2.Region))
		case src.AWSRDS != nil && src.AWSRDS.DBInstanceIdentifier == "" && src.AWSRDS.DBClusterIdentifier == "" && len(src.AWSRDS.Tags) == 0:
			msgs = append(msgs, fmt.Sprintf(
				"spec.sources[%s].awsRDS: no identifier and no tags would select every DB instance in %s; set dbInstanceIdentifier, dbClusterIdentifier or at least one tag",
				src.Name, src.AWSRDS.Region))
		}
	}
	return msgs
}
