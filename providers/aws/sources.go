package aws

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/backendslice/backendslice/api/v1alpha1"
	"github.com/backendslice/backendslice/providers"
)

// use records that the source of req, of kind, reads the listings of keys
// from now on and no longer those it read before (another region or role,
// or an Aurora cluster it no longer names); no keys let go of the source.
func (s *Session) use(kind providers.Kind, req providers.Request, keys ...listingKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.set(types.NamespacedName{Namespace: req.Namespace, Name: req.Backend}, interest{kind, req.Source.Name}, keys)
}

// forget lets go of backend's sources of kind other than those named in
// keep.
func (s *Session) forget(kind providers.Kind, backend types.NamespacedName, keep []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.sources[backend] {
		if i.kind == kind && !slices.Contains(keep, i.source) {
			s.set(backend, i, nil)
		}
	}
}

// set makes keys the listings that source i of backend reads. The new ones
// are acquired before the old ones are released, so that a listing both use
// keeps its answer. s.mu is held.
func (s *Session) set(backend types.NamespacedName, i interest, keys []listingKey) {
	for _, k := range keys {
		s.acquire(k)
	}
	of := s.sources[backend]
	for _, k := range of[i] {
		s.release(k)
	}
	switch {
	case len(keys) == 0:
		delete(of, i)
		if len(of) == 0 {
			delete(s.sources, backend)
		}
	case of == nil:
		s.sources[backend] = map[interest][]listingKey{i: keys}
	default:
		of[i] = keys
	}
}

// acquire counts one more user of the listing of k, making its entry, and the
// clients of its identity, on first use. s.mu is held.
func (s *Session) acquire(k listingKey) {
	sh, ok := s.listings[k]
	if !ok {
		c, ok := s.clients[k.identity]
		if !ok {
			c = s.newClients(k.identity)
			s.clients[k.identity] = c
		}
		c.listings++
		sh = &shared{clients: c}
		s.listings[k] = sh
	}
	sh.users++
}

// release counts one user of the listing of k less, dropping the listing, and
// the clients of its identity, when nothing uses them any more. s.mu is
// held.
func (s *Session) release(k listingKey) {
	sh := s.listings[k]
	if sh.users--; sh.users > 0 {
		return
	}
	delete(s.listings, k)
	if sh.clients.listings--; sh.clients.listings == 0 {
		delete(s.clients, k.identity)
	}
}

// Listings is how many Describe listings the session keeps: one per
// identity, region and action some source reads, whatever the number of
// sources sharing it.
func (s *Session) Listings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.listings)
}

// Clients is how many identities (role, region and endpoints) the session
// keeps SDK clients for: those some listing lists as.
func (s *Session) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}

// Close lets go of every stream and client, ends the listings in flight and
// waits for them. Resolve fails (transient) after it. Closing again does
// nothing more.
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	clear(s.sources)
	clear(s.listings)
	clear(s.clients)
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// spawn runs list in the background unless the session is closed, so that
// Close can wait for every listing it started.
func (s *Session) spawn(list func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(list)
	return true
}

// member is what every provider of a session has in common: the session
// it shares with the others and the kind of source it resolves.
type member struct {
	s    *Session
	kind providers.Kind
}

// targetOf is what a source of the provider's kind reads (see
// Session.targetOf); a source that cannot be read reads nothing from now
// on.
func (m member) targetOf(field, region, role string, req providers.Request) (target, error) {
	t, err := m.s.targetOf(field, region, role, req)
	if err != nil {
		m.s.use(m.kind, req)
	}
	return t, err
}

// open starts the Resolve of a source of the provider's kind: the source's
// field, for messages, and the target it reads. set says whether the
// request's source is of the kind at all; where gives its region and
// role.
func (m member) open(req providers.Request, set bool, where func() (region, role string)) (string, target, error) {
	field := fmt.Sprintf("spec.sources[%s].%s", req.Source.Name, m.kind)
	if !set {
		return field, target{}, providers.Terminalf(v1alpha1.ReasonInvalidSpec, "spec.sources[%s]: not an %s source", req.Source.Name, m.kind)
	}
	region, role := where()
	t, err := m.targetOf(field, region, role, req)
	return field, t, err
}

// Kind is the kind of source the provider resolves.
func (m member) Kind() providers.Kind { return m.kind }

// Forget lets go of the listings that backend's sources of the provider's
// kind other than those named in keep read; a listing no source reads any
// more is dropped. The controller calls it after each reconcile with the
// backend's sources of the kind, and with none when the backend goes.
func (m member) Forget(backend types.NamespacedName, keep ...string) {
	m.s.forget(m.kind, backend, keep)
}

// Close closes the session the provider shares with the other AWS
// providers (see Session.Close); closing several is the same as closing
// one.
func (m member) Close() { m.s.Close() }

// CheckConnection checks cc as the session does (Session.CheckConnection).
func (m member) CheckConnection(ctx context.Context, cc *providers.Connection) error {
	return m.s.CheckConnection(ctx, cc)
}

var (
	_ providers.Forgetter = member{}
	_ providers.Closer    = member{}
	_ providers.Checker   = member{}
)
