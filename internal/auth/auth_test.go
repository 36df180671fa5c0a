package auth

import (
	"bytes"
	"testing"
)

func TestMAC(t *testing.T) {
	tok := []byte("secret")
	n1, n2 := Nonce(), Nonce()
	if n1 == n2 {
		t.Fatal("two nonces are equal")
	}
	m := MAC(tok, "label", n1[:], n2[:])
	if !Check(tok, m[:], "label", n1[:], n2[:]) {
		t.Fatal("a MAC does not check")
	}
	for name, bad := range map[string]func() bool{
		"other token": func() bool { return Check([]byte("other"), m[:], "label", n1[:], n2[:]) },
		"other label": func() bool { return Check(tok, m[:], "label2", n1[:], n2[:]) },
		"other nonce": func() bool { return Check(tok, m[:], "label", n2[:], n1[:]) },
		"truncated":   func() bool { return Check(tok, m[:31], "label", n1[:], n2[:]) },
		"zero MAC":    func() bool { z := MAC(nil, "label"); return Check(tok, z[:], "label", n1[:], n2[:]) },
	} {
		if bad() {
			t.Errorf("%s: accepted", name)
		}
	}
	if z := MAC(nil, "label", n1[:]); !bytes.Equal(z[:], make([]byte, MACSize)) {
		t.Fatal("MAC without a token is not zero")
	}
	if !Check(nil, []byte("anything"), "label") {
		t.Fatal("Check without a token refused")
	}
}
