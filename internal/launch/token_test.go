package launch

import (
	"context"
	"regexp"
	"strings"
	"testing"
)

// TestJobToken: goccl run gives every rank of a job the same job token, a
// fresh random one per job, or the launcher's own when its environment has
// one, so that every job it starts authenticates its store and links.
func TestJobToken(t *testing.T) {
	tokens := func() string {
		t.Helper()
		var out syncBuffer
		err := Run(context.Background(), Config{NP: 3, Prog: "sh", Args: []string{"-c", "echo token=$" + EnvJobToken}, Stdout: &out})
		if err != nil {
			t.Fatal(err)
		}
		var tok string
		for r, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			_, v, _ := strings.Cut(line, "token=")
			if r > 0 && v != tok {
				t.Fatalf("ranks have different tokens:\n%s", out.String())
			}
			tok = v
		}
		return tok
	}
	t.Setenv(EnvJobToken, "")
	a, b := tokens(), tokens()
	for _, tok := range []string{a, b} {
		if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok) {
			t.Errorf("job token %q, want 64 hex digits", tok)
		}
	}
	if a == b {
		t.Errorf("two jobs got the same token %q", a)
	}
	t.Setenv(EnvJobToken, "the launcher's")
	if tok := tokens(); tok != "the launcher's" {
		t.Errorf("job token %q, want the launcher's", tok)
	}
}
