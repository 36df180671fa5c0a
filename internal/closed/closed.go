// Package closed holds the one "closed" error of goccl: goccl.ErrClosed,
// transport.ErrClosed and rendezvous.ErrClosed are made by New, so each
// keeps its own message while errors.Is treats them as one sentinel (an
// error wrapping transport.ErrClosed is goccl.ErrClosed, and so on).
package closed

// New returns a closed sentinel with the message msg.
func New(msg string) error { return &sentinel{msg} }

type sentinel struct{ msg string }

func (e *sentinel) Error() string { return e.msg }

// Is makes every closed sentinel match every other under errors.Is.
func (e *sentinel) Is(target error) bool {
	_, ok := target.(*sentinel)
	return ok
}
