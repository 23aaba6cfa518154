package slicestore

import (
	"testing"

	"github.com/backendslice/backendslice/api/v1alpha1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ledgerSlice is a slice of backend db named name, with uid and generation.
func ledgerSlice(name string, uid types.UID, generation int64) discoveryv1.EndpointSlice {
	return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: name, UID: uid, Generation: generation,
		Labels: map[string]string{v1alpha1.BackendLabel: "db"},
	}}
}

// TestLedgerSeesAll checks when the ledger trusts the cache's slices of a
// backend: after a list past the cache or a new Service, once the cache
// shows every write of ours, and not after a slice left the cache unseen.
func TestLedgerSeesAll(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	s0, s0v2, s1 := ledgerSlice("db-0", "u0", 1), ledgerSlice("db-0", "u0", 2), ledgerSlice("db-1", "u1", 1)
	s0reborn := ledgerSlice("db-0", "u9", 5)
	cases := []struct {
		name   string
		do     func(l *Store)
		cached []discoveryv1.EndpointSlice
		want   bool
	}{
		{"never listed (a restart)", func(*Store) {}, nil, false},
		{"written, never listed", func(l *Store) { l.Wrote(&s0, EndpointSlice, false) }, []discoveryv1.EndpointSlice{s0}, false},
		{"new Service, no slices", func(l *Store) { l.Trust(key, nil, nil) }, nil, true},
		{"listed, cache caught up", func(l *Store) { l.Trust(key, []discoveryv1.EndpointSlice{s0v2}, nil) },
			[]discoveryv1.EndpointSlice{s0v2}, true},
		{"listed, cache behind the list", func(l *Store) { l.Trust(key, []discoveryv1.EndpointSlice{s0v2}, nil) },
			[]discoveryv1.EndpointSlice{s0}, false},
		{"listed, cache holds a slice the list did not", func(l *Store) { l.Trust(key, nil, []discoveryv1.EndpointSlice{s1}) },
			[]discoveryv1.EndpointSlice{s1}, false},
		{"our create not in the cache yet", func(l *Store) { l.Trust(key, nil, nil); l.Wrote(&s1, EndpointSlice, false) }, nil, false},
		{"our update shown", func(l *Store) { l.Trust(key, nil, nil); l.Wrote(&s0v2, EndpointSlice, false) },
			[]discoveryv1.EndpointSlice{s0v2}, true},
		{"our update not shown yet", func(l *Store) { l.Trust(key, nil, nil); l.Wrote(&s0v2, EndpointSlice, false) },
			[]discoveryv1.EndpointSlice{s0}, false},
		{"a later generation (someone else's write) shows ours", func(l *Store) { l.Trust(key, nil, nil); l.Wrote(&s0, EndpointSlice, false) },
			[]discoveryv1.EndpointSlice{s0v2}, true},
		{"same name, another slice", func(l *Store) { l.Trust(key, nil, nil); l.Wrote(&s0, EndpointSlice, false) },
			[]discoveryv1.EndpointSlice{s0reborn}, false},
		{"our delete not shown yet", func(l *Store) { l.Trust(key, nil, nil); l.Wrote(&s0, EndpointSlice, true) },
			[]discoveryv1.EndpointSlice{s0}, false},
		{"our delete shown", func(l *Store) { l.Trust(key, nil, nil); l.Wrote(&s0, EndpointSlice, true); l.sliceRemoved(&s0) }, nil, true},
		{"a slice left the cache without our delete", func(l *Store) { l.Trust(key, []discoveryv1.EndpointSlice{s0}, nil); l.sliceRemoved(&s0) },
			nil, false},
		{"listed again after that", func(l *Store) {
			l.Trust(key, []discoveryv1.EndpointSlice{s0}, nil)
			l.sliceRemoved(&s0)
			l.Trust(key, []discoveryv1.EndpointSlice{s0}, nil)
		}, []discoveryv1.EndpointSlice{s0}, true},
		{"forgotten", func(l *Store) { l.Trust(key, nil, nil); l.Forget(key) }, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &Store{}
			c.do(l)
			if got := l.ShowsAll(key, c.cached); got != c.want {
				t.Errorf("seesAll = %t, want %t", got, c.want)
			}
		})
	}
}

// TestLedgerForgetsWhatTheCacheShows: a write the cache showed once is
// not asked for again, so the ledger does not grow with the writes.
func TestLedgerForgetsWhatTheCacheShows(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "db"}
	l := &Store{}
	l.Trust(key, nil, nil)
	for g := range int64(100) {
		s := ledgerSlice("db-0", "u0", g+1)
		l.Wrote(&s, EndpointSlice, false)
		if !l.ShowsAll(key, []discoveryv1.EndpointSlice{s}) {
			t.Fatalf("generation %d shown, not trusted", g+1)
		}
	}
	if n := pendingOf(l, key); n != 0 {
		t.Errorf("%d writes still pending after the cache showed them all", n)
	}
}

// pendingOf is how many writes of backend key the ledger still waits for.
func pendingOf(s *Store, key types.NamespacedName) int {
	var n int
	s.lookup(key, func(b *record) { n = len(b.ledger.pending) })
	return n
}
