package providers

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// Error is a provider failure with the reason to put on status.
type Error struct {
	// Terminal is true when the spec or configuration is wrong: retrying will
	// not help until one of them changes. Otherwise the failure is transient
	// and retried with backoff.
	Terminal bool
	// Gone is true when the backend itself no longer exists (a DNS name
	// answers NXDOMAIN, an instance was deleted): what the source published
	// drains and leaves, instead of being kept as last known good.
	Gone bool
	// Reason is a CamelCase condition reason from api/v1alpha1.
	Reason string
	// Err says what went wrong, naming the field and the fix where it can.
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Transient wraps err as a failure that is retried with backoff while the last
// known endpoints are kept.
func Transient(err error) error {
	return &Error{Reason: v1alpha1.ReasonSourceFailed, Err: err}
}

// Terminal wraps err as a failure of the spec or configuration that retrying
// does not fix; reason is a condition reason from api/v1alpha1.
func Terminal(reason string, err error) error {
	return &Error{Terminal: true, Reason: reason, Err: err}
}

// Gone wraps err as a terminal failure saying the backend no longer exists:
// its endpoints drain instead of being kept.
func Gone(reason string, err error) error {
	return &Error{Terminal: true, Gone: true, Reason: reason, Err: err}
}

// Terminalf formats a terminal failure.
func Terminalf(reason, format string, args ...any) error {
	return Terminal(reason, fmt.Errorf(format, args...))
}

// AsError returns err as an *Error; an untyped error counts as transient,
// so that an unexpected failure is retried rather than given up on.
func AsError(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return &Error{Reason: v1alpha1.ReasonSourceFailed, Err: err}
}

// Outcomes of a provider call, as Outcome names them.
const (
	OutcomeSuccess   = "success"
	OutcomeGone      = "gone"
	OutcomeTerminal  = "terminal"
	OutcomeTransient = "transient"
)

// Outcome names what a provider call's err says: success (nil), gone (the
// backend no longer exists: an answer, not a failure of the provider),
// terminal (the spec or configuration is wrong) or transient (retried).
func Outcome(err error) string {
	switch e := AsError(err); {
	case err == nil:
		return OutcomeSuccess
	case e.Gone:
		return OutcomeGone
	case e.Terminal:
		return OutcomeTerminal
	}
	return OutcomeTransient
}

// IsTerminal reports whether err is a terminal provider failure.
func IsTerminal(err error) bool {
	return err != nil && AsError(err).Terminal
}

// Printable is s on one line, each run of whitespace one space, without
// the other characters that do not print, cut to at most limit bytes on a
// character boundary: a message on a status must not carry terminal escapes
// or another server's page.
func Printable(s string, limit int) string {
	s = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r):
			return ' '
		case !unicode.IsPrint(r):
			return -1
		}
		return r
	}, s)), " ")
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
