package externalbackend

import (
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestOwns: a slice is ours by its owner, or by our field manager where the
// owner is gone; labels alone never make it ours.
func TestOwns(t *testing.T) {
	svcRef := func(name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: uid, Controller: ptr.To(true)}}
	}
	ours := []metav1.ManagedFieldsEntry{{Manager: v1alpha1.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate}}
	theirs := []metav1.ManagedFieldsEntry{{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate}}
	labels := map[string]string{discoveryv1.LabelServiceName: "db", discoveryv1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.BackendLabel: "db"}
	for _, c := range []struct {
		name   string
		owners []metav1.OwnerReference
		fields []metav1.ManagedFieldsEntry
		uid    types.UID
		want   bool
	}{
		{"controlled by the Service", svcRef("db", "u1"), theirs, "u1", true},
		{"controlled by the Service, not known yet", svcRef("db", "u1"), theirs, "", true},
		{"controlled by another Service", svcRef("other", "u2"), ours, "u1", false},
		{"controlled by something else", []metav1.OwnerReference{{Kind: "Deployment", Name: "db", UID: "u1", Controller: ptr.To(true)}}, ours, "u1", false},
		{"an earlier Service of the name, written by us", svcRef("db", "u0"), ours, "u1", true},
		{"an earlier Service of the name, never written by us", svcRef("db", "u0"), theirs, "u1", false},
		{"owner stripped, written by us", nil, append(theirs, ours...), "u1", true},
		{"hand-made with our labels", nil, theirs, "u1", false},
		{"non-controller owner only", []metav1.OwnerReference{{Kind: "Service", Name: "db", UID: "u1"}}, theirs, "u1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: labels, OwnerReferences: c.owners, ManagedFields: c.fields}}
			if got := owns(s, "db", c.uid); got != c.want {
				t.Errorf("owns = %v, want %v", got, c.want)
			}
		})
	}
}
