package config

import (
	"sort"
	"strings"
	"testing"
	"time"
)

func TestVarsDeclared(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range All() {
		if seen[v.Name] {
			t.Errorf("%s declared twice", v.Name)
		}
		seen[v.Name] = true
		if v.Doc == "" {
			t.Errorf("%s has no doc line", v.Name)
		}
		if v.Default != "" {
			if err := v.Check(v.Default); err != nil {
				t.Errorf("%s: its default is invalid: %v", v.Name, err)
			}
		}
		if (v.Kind == Enum || v.Kind == List) && len(v.Words) == 0 {
			t.Errorf("%s is an enum without words", v.Name)
		}
		if v.Kind == Int && v.Min > v.Max {
			t.Errorf("%s: empty range [%d, %d]", v.Name, v.Min, v.Max)
		}
	}
	if Find("GOCCL_TIMEOUT") != Timeout || Find("GOCCL_NOPE") != nil {
		t.Error("Find")
	}
	if n := Names(); len(n) != len(All()) || !strings.HasPrefix(n[0], Prefix) {
		t.Errorf("Names: %v", n)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "8": 8, "8B": 8, "1K": 1024, "1k": 1024, "4KB": 4096, "4KiB": 4096, "1.5M": 3 << 19,
		"8G": 8 << 30, "2T": 2 << 40, " 64M ": 64 << 20, "+16": 16,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "-1", "1X", "1Kx", "1P", "iB", "1iB", "abc", "1e400", "9999999T"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q): no error", in)
		} else if in != "9999999T" && !strings.Contains(err.Error(), SizeSyntax) {
			t.Errorf("ParseSize(%q): %v does not list the suffixes", in, err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"90": 90 * time.Second, "0.5": 500 * time.Millisecond, "5m": 5 * time.Minute, "1h30m": 90 * time.Minute} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"x", "-1", "-5s", "5 parsecs", "1e300"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q): no error", in)
		}
	}
}

func TestTypedGetters(t *testing.T) {
	t.Setenv(NSocksPerPeer.Name, "")
	if n, ok, err := NSocksPerPeer.Int(); n != 2 || !ok || err != nil {
		t.Errorf("unset NSOCKS: %d %v %v, want the default 2", n, ok, err)
	}
	t.Setenv(NSocksPerPeer.Name, " 8 ")
	if n, _, err := NSocksPerPeer.Int(); n != 8 || err != nil {
		t.Errorf("NSOCKS=8: %d %v", n, err)
	}
	t.Setenv(NSocksPerPeer.Name, "65")
	if _, _, err := NSocksPerPeer.Int(); err == nil || !strings.Contains(err.Error(), `GOCCL_NSOCKS_PERPEER="65": want an integer in [1, 64]`) {
		t.Errorf("NSOCKS=65: %v", err)
	}
	if err := CheckEnv(); err == nil || !strings.Contains(err.Error(), "GOCCL_NSOCKS_PERPEER") {
		t.Errorf("CheckEnv: %v", err)
	}
	t.Setenv(NSocksPerPeer.Name, "")

	for in, want := range map[string]bool{"1": true, "TRUE": true, "on": true, "yes": true, "0": false, "off": false, "No": false, "": false} {
		t.Setenv(ShmDisable.Name, in)
		if got, err := ShmDisable.Bool(); got != want || err != nil {
			t.Errorf("SHM_DISABLE=%q: %v %v", in, got, err)
		}
	}
	t.Setenv(ShmDisable.Name, "2")
	if _, err := ShmDisable.Bool(); err == nil || !strings.Contains(err.Error(), "GOCCL_SHM_DISABLE") {
		t.Errorf("SHM_DISABLE=2: %v", err)
	}
	t.Setenv(ShmDisable.Name, "")

	t.Setenv(Algo.Name, "RHD")
	if w, err := Algo.Word(); w != "rhd" || err != nil {
		t.Errorf("ALGO=RHD: %q %v", w, err)
	}
	t.Setenv(Algo.Name, "bogus")
	if _, err := Algo.Word(); err == nil || !strings.Contains(err.Error(), "ring, rhd, rd, tree, direct or hier") {
		t.Errorf("ALGO=bogus: %v", err)
	}
	t.Setenv(Algo.Name, "")

	t.Setenv(Timeout.Name, "")
	if d, ok, err := Timeout.Duration(); d != 5*time.Minute || !ok || err != nil {
		t.Errorf("unset TIMEOUT: %v %v %v", d, ok, err)
	}
	if v, src := JobToken.Source(); v != "" || src != "unset" {
		t.Errorf("JobToken.Source() = %q %q", v, src)
	}
	t.Setenv(ShmCMAThreshold.Name, "64K")
	if n, ok, err := ShmCMAThreshold.Size(); n != 64<<10 || !ok || err != nil {
		t.Errorf("CMA_THRESHOLD=64K: %d %v %v", n, ok, err)
	}
}

func TestDebugLevel(t *testing.T) {
	for in, want := range map[string][2]bool{"": {false, false}, "WARN": {false, false}, "info": {true, false}, "TRACE": {true, true}, "verbose": {false, false}} {
		t.Setenv(Debug.Name, in)
		if DebugInfo() != want[0] || DebugTrace() != want[1] {
			t.Errorf("GOCCL_DEBUG=%q: info %v trace %v, want %v", in, DebugInfo(), DebugTrace(), want)
		}
	}
}

func TestWarnOnly(t *testing.T) {
	t.Setenv(Debug.Name, "LOUD")
	if err := CheckEnv(); err != nil {
		t.Errorf("CheckEnv refused a WarnOnly variable: %v", err)
	}
	if err := Debug.Check("LOUD"); err == nil || !strings.Contains(err.Error(), "WARN, INFO or TRACE") {
		t.Errorf("Check(LOUD): %v", err)
	}
}

func TestDebugSubsys(t *testing.T) {
	for in, want := range map[string]string{"": "ALL", "init,net": "INIT NET", " ^ NET , coll ": "^COLL NET", "^shm": "^SHM"} {
		t.Setenv(DebugSubsys.Name, in)
		w, inv, err := DebugSubsys.WordList()
		sort.Strings(w)
		got := strings.Join(w, " ")
		if inv {
			got = "^" + got
		}
		if err != nil || got != want {
			t.Errorf("GOCCL_DEBUG_SUBSYS=%q: %q %v, want %q", in, got, err, want)
		}
	}
	t.Setenv(DebugSubsys.Name, "INIT,GRAPH")
	if w, _, err := DebugSubsys.WordList(); len(w) != 1 || err == nil || !strings.Contains(err.Error(), "unknown GRAPH") {
		t.Errorf("INIT,GRAPH: %v %v", w, err)
	}
	if err := CheckEnv(); err != nil {
		t.Errorf("CheckEnv refused a WarnOnly list: %v", err)
	}
	if err := DebugSubsys.Check("NET,BOGUS"); err == nil {
		t.Error("Check(NET,BOGUS): no error")
	}
}
