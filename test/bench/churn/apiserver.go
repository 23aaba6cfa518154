package churn

import (
	"encoding/json"
	"fmt"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Counts are the EndpointSlice writes one writer made.
type Counts struct {
	Creates, Updates, Deletes int
	// Bytes is the JSON size of the objects sent by creates and updates.
	Bytes int
}

// Writes is the number of API writes.
func (c Counts) Writes() int { return c.Creates + c.Updates + c.Deletes }

// apiServer is a client-go fake that behaves like the API server where
// slice writers can tell: a create gets a UID, generation 1 and a name from
// generateName; an update keeps the UID and bumps the generation when the
// endpoints or ports change; every write gets a new resourceVersion. It
// counts the EndpointSlice writes it receives.
type apiServer struct {
	*fake.Clientset
	counts  Counts
	serial  int
	failure error
}

// newAPIServer returns an empty fake API server.
func newAPIServer() *apiServer {
	a := &apiServer{Clientset: fake.NewSimpleClientset()}
	a.PrependReactor("create", "endpointslices", a.create)
	a.PrependReactor("update", "endpointslices", a.update)
	a.PrependReactor("delete", "endpointslices", a.delete)
	return a
}

// create counts a create and fills in what the API server would; the
// tracker behind it then stores the object.
func (a *apiServer) create(action k8stesting.Action) (bool, runtime.Object, error) {
	s, ok := action.(k8stesting.CreateAction).GetObject().(*discoveryv1.EndpointSlice)
	if !ok {
		return true, nil, fmt.Errorf("create of %T, not an EndpointSlice", action)
	}
	a.counts.Creates++
	a.counts.Bytes += a.size(s)
	a.serial++
	if s.Name == "" {
		s.Name = s.GenerateName + strconv.FormatInt(int64(a.serial), 36)
	}
	s.UID = types.UID(fmt.Sprintf("uid-%d", a.serial))
	s.Generation = 1
	s.ResourceVersion = strconv.Itoa(a.serial)
	return false, nil, nil
}

// update counts an update and keeps UID and generation as the API server does.
func (a *apiServer) update(action k8stesting.Action) (bool, runtime.Object, error) {
	s, ok := action.(k8stesting.UpdateAction).GetObject().(*discoveryv1.EndpointSlice)
	if !ok {
		return true, nil, fmt.Errorf("update of %T, not an EndpointSlice", action)
	}
	a.counts.Updates++
	a.counts.Bytes += a.size(s)
	old, err := a.Tracker().Get(action.GetResource(), s.Namespace, s.Name)
	if err != nil {
		return true, nil, err
	}
	was, ok := old.(*discoveryv1.EndpointSlice)
	if !ok {
		return true, nil, fmt.Errorf("stored %T, not an EndpointSlice", old)
	}
	a.serial++
	s.UID, s.Generation = was.UID, was.Generation
	if !equality.Semantic.DeepEqual(s.Endpoints, was.Endpoints) || !equality.Semantic.DeepEqual(s.Ports, was.Ports) {
		s.Generation++
	}
	s.ResourceVersion = strconv.Itoa(a.serial)
	return false, nil, nil
}

// delete counts a delete.
func (a *apiServer) delete(k8stesting.Action) (bool, runtime.Object, error) {
	a.counts.Deletes++
	return false, nil, nil
}

// size is the JSON size of a written object; a failure to encode is kept
// and reported by take.
func (a *apiServer) size(s *discoveryv1.EndpointSlice) int {
	b, err := json.Marshal(s)
	if err != nil {
		a.failure = err
	}
	return len(b)
}

// take returns the counts since the last take and resets them.
func (a *apiServer) take() (Counts, error) {
	c, err := a.counts, a.failure
	a.counts, a.failure = Counts{}, nil
	return c, err
}
