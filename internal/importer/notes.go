package importer

import (
	"fmt"
	"slices"
	"strings"
)

// NoteKind says what a note means for what clients and EndpointSlice
// consumers see once the ExternalBackend replaces the objects it was
// imported from.
type NoteKind int

// Note kinds, from the most harmless.
const (
	// Info changes nothing clients or consumers see.
	Info NoteKind = iota
	// Changed is carried over, but as something consumers see differently.
	Changed
	// LeftOut is in the input and not carried over.
	LeftOut
	// Refused is an object that is not imported at all.
	Refused
)

// String is the kind as notes print it.
func (k NoteKind) String() string {
	switch k {
	case Changed:
		return "changed"
	case LeftOut:
		return "left out"
	case Refused:
		return "refused"
	default:
		return "note"
	}
}

// Note is one thing an import says about its input.
type Note struct {
	Kind NoteKind
	// Object is the input object the note is about: "Kind namespace/name".
	Object string
	// Text says what and why, and the fix where there is one.
	Text string
}

// String is the note on one line: kind, object, text.
func (n Note) String() string { return fmt.Sprintf("%s: %s: %s", n.Kind, n.Object, n.Text) }

// maxListed is how many addresses one note names before it counts the rest.
const maxListed = 8

// noteKey identifies notes that say the same of the same object, so that
// one note can name every endpoint it applies to.
type noteKey struct {
	kind   NoteKind
	object string
	text   string
}

// notebook collects the notes of one import step. A note about endpoints
// that says the same thing of the same object as an earlier one is merged
// into it, listing the addresses, so that 500 not-ready addresses are one
// line, not 500.
type notebook struct {
	order []noteKey
	addrs map[noteKey][]string
}

// add notes something about an object.
func (nb *notebook) add(kind NoteKind, object, format string, args ...any) {
	nb.endpoint(kind, object, "", fmt.Sprintf(format, args...))
}

// endpoint notes something about the endpoint at address (none when "") of
// an object.
func (nb *notebook) endpoint(kind NoteKind, object, address, text string) {
	k := noteKey{kind: kind, object: object, text: text}
	if nb.addrs == nil {
		nb.addrs = map[noteKey][]string{}
	}
	if _, seen := nb.addrs[k]; !seen {
		nb.order = append(nb.order, k)
		nb.addrs[k] = nil
	}
	if address != "" {
		nb.addrs[k] = append(nb.addrs[k], address)
	}
}

// notes are the notes in the order they were first made.
func (nb *notebook) notes() []Note {
	out := make([]Note, 0, len(nb.order))
	for _, k := range nb.order {
		text := k.text
		if addrs := nb.addrs[k]; len(addrs) > 0 {
			text = endpointList(addrs) + ": " + text
		}
		out = append(out, Note{Kind: k.kind, Object: k.object, Text: text})
	}
	return out
}

// endpointList names the endpoints at addrs, the first maxListed of them.
func endpointList(addrs []string) string {
	if len(addrs) > 1 {
		return "endpoints " + someOf(addrs)
	}
	return "endpoint " + someOf(addrs)
}

// someOf lists the first maxListed items, and counts the others.
func someOf(items []string) string {
	shown := items[:min(len(items), maxListed)]
	s := strings.Join(shown, ", ")
	if more := len(items) - len(shown); more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// Lossless reports whether notes say nothing was left out or changed: the
// ExternalBackend publishes the same endpoints, conditions and ports.
func Lossless(notes []Note) bool {
	return !slices.ContainsFunc(notes, func(n Note) bool { return n.Kind != Info })
}
