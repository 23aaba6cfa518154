// Package admission runs, offline, what the API server runs when a custom
// resource is created: decoding with strict field validation, pruning,
// defaulting, the CRD's OpenAPI schema, its list types, its embedded
// object metadata, and every x-kubernetes-validations rule with CEL's cost
// limits. It is the API server's own code (k8s.io/apiextensions-apiserver
// at the release envtest's kube-apiserver runs), composed as the custom
// resource handler and its strategy compose it, so that its verdicts and
// messages are those of admission; the differential test in
// test/e2e/validate holds it to a real API server.
//
// The handler's registry package (k8s.io/apiextensions-apiserver/pkg/registry/customresource)
// is not imported: it carries etcd's client, gRPC gateways and OpenTelemetry
// exporters into whatever imports it, and the shipped binary uses this
// package. Its Validate is eight lines, mirrored in validateCreate.
package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/operation"
	"k8s.io/apimachinery/pkg/api/validate/content"
	genericvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"sigs.k8s.io/yaml"
)

// Checker holds, for each served version of each CRD it was built from,
// what the API server compiles once per CRD: the structural schema, the
// OpenAPI validator and the CEL programs. It is safe for concurrent use.
type Checker struct {
	versions map[schema.GroupVersionKind]*version
	kinds    map[schema.GroupKind][]string
}

// version is one served version of a CRD.
type version struct {
	gvk             schema.GroupVersionKind
	namespaced      bool
	structural      *structuralschema.Structural
	schemaValidator apiservervalidation.SchemaValidator
	cel             *cel.Validator
	hasStatus       bool
	// warning is the version's deprecation warning, "" when it is not deprecated.
	warning string
	// deprecated are the schema paths of fields whose description marks
	// them deprecated.
	deprecated []string
}

// New compiles the CRDs, each given as YAML or JSON.
func New(crds ...[]byte) (*Checker, error) {
	c := &Checker{versions: map[schema.GroupVersionKind]*version{}, kinds: map[schema.GroupKind][]string{}}
	for _, data := range crds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("reading a CRD: %w", err)
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			cv, err := compile(crd, v)
			if err != nil {
				return nil, fmt.Errorf("CRD %s, version %s: %w", crd.Name, v.Name, err)
			}
			c.versions[cv.gvk] = cv
			c.kinds[cv.gvk.GroupKind()] = append(c.kinds[cv.gvk.GroupKind()], v.Name)
		}
	}
	return c, nil
}

// compile builds what the API server's CRD handler builds for one served
// version (getOrCreateServingInfoFor): the structural schema with its
// defaults pruned, the schema validator of the internal schema, and the
// CEL validator of the strategy.
func compile(crd *apiextensionsv1.CustomResourceDefinition, v apiextensionsv1.CustomResourceDefinitionVersion) (*version, error) {
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		return nil, errors.New("no schema")
	}
	internal := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, err
	}
	sv, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	out := &version{
		gvk:             schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind},
		namespaced:      crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		structural:      s,
		schemaValidator: sv,
		cel:             cel.NewValidator(s, true, celconfig.PerCallLimit),
		hasStatus:       v.Subresources != nil && v.Subresources.Status != nil,
		deprecated:      deprecatedFields(internal.OpenAPIV3Schema, ""),
	}
	if v.Deprecated {
		out.warning = fmt.Sprintf("%s/%s %s is deprecated", crd.Spec.Group, v.Name, crd.Spec.Names.Kind)
		if v.DeprecationWarning != nil {
			out.warning = *v.DeprecationWarning
		}
	}
	return out, nil
}

// Result is what a create would do with an object.
type Result struct {
	// Object is the object as it would be stored: pruned and defaulted;
	// nil when it cannot be decoded.
	Object *unstructured.Unstructured
	// Err is the API server's refusal, an apierrors.StatusError, or nil.
	Err error
	// Unknown are the paths of the fields the CRD does not know, which
	// strict field validation refuses (Err says so too).
	Unknown []string
	// Warnings are what the API server, and its client, would warn of:
	// a deprecated version, deprecated fields set.
	Warnings []Warning
}

// Warning is a warning with the field it concerns ("" for the object).
type Warning struct {
	Field   string
	Message string
}

// Causes are the field errors of an Invalid refusal, nil for any other
// result.
func (r Result) Causes() []metav1.StatusCause {
	var status apierrors.APIStatus
	if r.Err == nil || !errors.As(r.Err, &status) || status.Status().Details == nil {
		return nil
	}
	return status.Status().Details.Causes
}

// Create runs, on the JSON of an object, what the API server runs for a
// create with fieldValidation=Strict (kubectl's and Argo CD's default)
// into namespace: objects of namespaced kinds that name none go there.
func (c *Checker) Create(ctx context.Context, data []byte, namespace string) Result {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return Result{Err: apierrors.NewBadRequest(err.Error())}
	}
	gvk := u.GroupVersionKind()
	v := c.versions[gvk]
	if v == nil {
		// The API server answers 404 for a version it does not serve.
		return Result{Err: &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound,
			Reason: metav1.StatusReasonNotFound, Message: fmt.Sprintf("%s %s: the CRD serves versions %v of %s only",
				gvk.GroupVersion(), gvk.Kind, c.kinds[gvk.GroupKind()], gvk.Group)}}}
	}
	unknown, err := v.coerce(u)
	if err != nil {
		return Result{Err: v.decodeError(gvk, err)}
	}
	if len(unknown) > 0 {
		// The strict JSON serializer's error, as the API server returns it.
		errs := make([]error, len(unknown))
		for i, f := range unknown {
			errs[i] = fmt.Errorf(`unknown field "%s"`, f)
		}
		return Result{Object: u, Unknown: unknown, Err: v.decodeError(gvk, runtime.NewStrictDecodingError(errs))}
	}
	structuraldefaulting.Default(u.Object, v.structural)

	// rest.BeforeCreate: the request's namespace, then the strategy.
	if v.namespaced {
		if u.GetNamespace() == "" {
			u.SetNamespace(namespace)
		}
	} else {
		u.SetNamespace("")
	}
	if u.GetName() == "" && u.GetGenerateName() != "" {
		u.SetName(u.GetGenerateName() + "xxxxx")
	}
	v.prepareForCreate(u)
	res := Result{Object: u, Warnings: v.warnings(u)}
	if errs := v.validateCreate(ctx, u); len(errs) > 0 {
		res.Err = apierrors.NewInvalid(gvk.GroupKind(), u.GetName(), errs)
	}
	return res
}

// decodeError is the API server's refusal of a body it cannot decode into
// the version's kind (the handlers' transformDecodeError).
func (v *version) decodeError(gvk schema.GroupVersionKind, err error) error {
	return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", gvk.Kind, gvk.Version, v.gvk.Kind, err))
}

// UnknownFieldMessage is the API server's refusal of the unknown field f
// alone, for a message per field.
func (r Result) UnknownFieldMessage(f string) string {
	gvk := r.Object.GroupVersionKind()
	return fmt.Sprintf(`%s in version %q cannot be handled as a %s: strict decoding error: unknown field "%s"`, gvk.Kind, gvk.Version, gvk.Kind, f)
}

// coerce is the custom resource handler's schema-coercing decoder
// (unstructuredSchemaCoercer.apply with unknown field paths returned, as
// under fieldValidation=Strict): object metadata read and rewritten,
// unknown fields pruned and named, non-nullable nulls without a default
// dropped.
func (v *version) coerce(u *unstructured.Unstructured) ([]string, error) {
	kind, foundKind, err := unstructured.NestedString(u.Object, "kind")
	if err != nil {
		return nil, err
	}
	apiVersion, foundAPIVersion, err := unstructured.NestedString(u.Object, "apiVersion")
	if err != nil {
		return nil, err
	}
	objectMeta, foundObjectMeta, unknown, err := schemaobjectmeta.GetObjectMetaWithOptions(u.Object, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return nil, err
	}
	unknown = append(unknown, structuralpruning.PruneWithOptions(u.Object, v.structural, true,
		structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})...)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, v.structural)
	ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, u.Object, v.structural, false, schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: true})
	if ferr != nil {
		return nil, ferr
	}
	unknown = append(unknown, paths...)
	if foundKind {
		u.SetKind(kind)
	}
	if foundAPIVersion {
		u.SetAPIVersion(apiVersion)
	}
	if foundObjectMeta {
		if err := schemaobjectmeta.SetObjectMeta(u.Object, objectMeta); err != nil {
			return nil, err
		}
	}
	return unknown, nil
}

// prepareForCreate is the strategy's PrepareForCreate: a create cannot set
// status, and starts at generation 1.
func (v *version) prepareForCreate(u *unstructured.Unstructured) {
	if v.hasStatus {
		delete(u.Object, "status")
	}
	u.SetGeneration(1)
}

// validateCreate is rest.ValidateCreate with the custom resource
// strategy's Validate: type and object metadata, the OpenAPI schema, the
// embedded resources and list types, then the CEL rules unless an error
// blocks them; the common metadata checks come last, and only when
// nothing else failed.
func (v *version) validateCreate(ctx context.Context, u *unstructured.Unstructured) field.ErrorList {
	errs := v.validateTypeMeta(u)
	if len(errs) == 0 {
		errs = append(errs, v.validateObjectMeta(ctx, u)...)
		errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.UnstructuredContent(), v.schemaValidator)...)
	}
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, v.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, v.structural, u.Object)...)
	if v.cel != nil {
		if blocking := blockingError(errs); blocking != nil {
			errs = append(errs, blocking)
		} else {
			celErrs, _ := v.cel.Validate(ctx, nil, v.structural, u.Object, nil, celconfig.RuntimeCELCostBudget)
			errs = append(errs, celErrs...)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, genericvalidation.ValidateObjectMetaAccessor(u, v.namespaced, pathSegmentName, field.NewPath("metadata"))...)
	}
	return errs
}

// validateTypeMeta is the custom resource validator's check that the
// object is of the version's kind.
func (v *version) validateTypeMeta(u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if u.GetKind() != v.gvk.Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), u.GetKind(), fmt.Sprintf("must be %v", v.gvk.Kind)))
	}
	if want := v.gvk.GroupVersion().String(); u.GetAPIVersion() != want {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), u.GetAPIVersion(), fmt.Sprintf("must be %v", want)))
	}
	return errs
}

// validateObjectMeta is the custom resource validator's metadata check.
func (v *version) validateObjectMeta(ctx context.Context, u *unstructured.Unstructured) field.ErrorList {
	raw := u.Object["metadata"]
	objectMeta := &metav1.ObjectMeta{}
	if raw != nil {
		m, ok := raw.(map[string]any)
		if !ok {
			return field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, fmt.Sprintf("expected map[string]interface{}, got %T", raw))}
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, objectMeta); err != nil {
			return field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, err.Error())}
		}
	}
	return genericvalidation.ValidateObjectMetaDeclaratively(ctx, operation.Create, objectMeta, nil, v.namespaced,
		genericvalidation.NameIsDNSSubdomain, field.NewPath("metadata"), utilfeature.DefaultFeatureGate.Enabled(features.DeclarativeValidationBeta))
}

// blockingError is the strategy's rule that an object failing its
// OpenAPI schema in type, size, enum or required fields is not handed to
// CEL, whose rules assume the schema holds.
func blockingError(errs field.ErrorList) *field.Error {
	blocking := []field.ErrorType{field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid}
	for _, err := range errs {
		if slices.Contains(blocking, err.Type) {
			return field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")
		}
	}
	return nil
}

// pathSegmentName is rest's name check: a name must be usable as a path
// segment of the resource's URL.
func pathSegmentName(name string, prefix bool) []string {
	if prefix {
		return content.IsPathSegmentPrefix(name)
	}
	return content.IsPathSegmentName(name)
}

// warnings are the version's deprecation and the deprecated fields u sets.
func (v *version) warnings(u *unstructured.Unstructured) []Warning {
	var out []Warning
	if v.warning != "" {
		out = append(out, Warning{Message: v.warning})
	}
	for _, path := range v.deprecated {
		if f := setFields(u.Object, path); len(f) > 0 {
			for _, p := range f {
				out = append(out, Warning{Field: p, Message: p + ": deprecated"})
			}
		}
	}
	return out
}
