package closed

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestOneSentinel(t *testing.T) {
	a, b := New("a closed"), New("b closed")
	wrapped := fmt.Errorf("recv peer 1: %w", a)
	if !errors.Is(wrapped, b) || !errors.Is(b, a) || !errors.Is(a, a) {
		t.Error("closed sentinels do not match each other")
	}
	if errors.Is(io.EOF, a) || errors.Is(a, io.EOF) {
		t.Error("a closed sentinel matches io.EOF")
	}
	if wrapped.Error() != "recv peer 1: a closed" {
		t.Errorf("message %q", wrapped)
	}
}
