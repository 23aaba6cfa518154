package v1alpha1

// AWSRegion is the name of an AWS region, such as eu-west-1, us-gov-west-1,
// cn-north-1 or eusc-de-east-1: one type, so that every source kind and the
// BackendProvider accept the same names and refuse the rest with the same
// message (the API server puts the field's path before it). A longer name
// is refused by its length alone.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.size() > 32 || self.matches('^([a-z]{2}(-gov|-iso[a-z]?)?|eusc-[a-z]{2})-[a-z]+-[0-9]{1,2}$')",message="not an AWS region name such as eu-west-1, us-gov-west-1, cn-north-1 or eusc-de-east-1"
type AWSRegion string
