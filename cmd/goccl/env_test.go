package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/config"
)

func TestEnvCommand(t *testing.T) {
	for _, v := range config.All() {
		t.Setenv(v.Name, "")
	}
	t.Setenv("GOCCL_NSOCKS_PERPEER", "4")
	t.Setenv("GOCCL_ALGO", "ring")
	var o, e bytes.Buffer
	if code := cli([]string{"env"}, &o, &e); code != 0 {
		t.Fatalf("goccl env: exit %d, stderr %q", code, e.String())
	}
	lines := strings.Split(strings.TrimSpace(o.String()), "\n")
	if len(lines) != len(config.All())+1 {
		t.Fatalf("%d lines, want a header and one per variable (%d):\n%s", len(lines), len(config.All()), o.String())
	}
	want := map[string][]string{
		"GOCCL_NSOCKS_PERPEER": {"4", "env"},
		"GOCCL_ALGO":           {"ring", "env"},
		"GOCCL_TIMEOUT":        {"5m", "default"},
		"GOCCL_JOB_TOKEN":      {"-", "unset"},
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if w, ok := want[f[0]]; ok {
			if f[1] != w[0] || f[2] != w[1] {
				t.Errorf("%s: value %q source %q, want %q %q", f[0], f[1], f[2], w[0], w[1])
			}
			delete(want, f[0])
		}
	}
	if len(want) > 0 {
		t.Errorf("not listed: %v", want)
	}
}

func TestEnvCommandInvalid(t *testing.T) {
	for _, v := range config.All() {
		t.Setenv(v.Name, "")
	}
	t.Setenv("GOCCL_NSOCKS_PERPEER", "0")
	var o, e bytes.Buffer
	if code := cli([]string{"env", "-json"}, &o, &e); code != 1 {
		t.Fatalf("exit %d, want 1 for an invalid value", code)
	}
	found := false
	for _, l := range strings.Split(strings.TrimSpace(o.String()), "\n") {
		var r envRow
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if r.Name == "GOCCL_NSOCKS_PERPEER" {
			found = true
			if r.Source != "env" || !strings.Contains(r.Error, "[1, 64]") {
				t.Errorf("row %+v: want source env and an error naming the range", r)
			}
		} else if r.Error != "" {
			t.Errorf("unexpected error on %s: %s", r.Name, r.Error)
		}
	}
	if !found {
		t.Error("GOCCL_NSOCKS_PERPEER not listed")
	}
}
