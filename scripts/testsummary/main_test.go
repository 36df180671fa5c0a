package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// stream turns (action, package, test, output) rows into go test -json lines.
func stream(t *testing.T, rows [][4]string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range rows {
		e := map[string]string{"Action": r[0], "Package": r[1]}
		if r[2] != "" {
			e["Test"] = r[2]
		}
		if r[3] != "" {
			e["Output"] = r[3]
		}
		j, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestFilter(t *testing.T) {
	const a, b = "example.com/m/a", "example.com/m/b"
	in := stream(t, [][4]string{
		{"start", a, "", ""},
		{"run", a, "TestOK", ""},
		{"output", a, "TestOK", "=== RUN   TestOK\n"},
		{"output", a, "TestOK", "    a_test.go:9: chatter of a passing test\n"},
		{"output", a, "TestOK", "--- PASS: TestOK (0.00s)\n"},
		{"pass", a, "TestOK", ""},
		{"output", a, "TestRoot", "=== RUN   TestRoot\n"},
		{"output", a, "TestRoot", "    a_test.go:20: needs root\n"},
		{"output", a, "TestRoot", "--- SKIP: TestRoot (0.00s)\n"},
		{"skip", a, "TestRoot", ""},
		{"output", a, "TestT", "=== RUN   TestT\n"},
		{"output", a, "TestT/sub", "=== RUN   TestT/sub\n"},
		{"output", a, "TestT/sub", "    a_test.go:30: no mpirun\n"},
		{"output", a, "TestT/sub", "    --- SKIP: TestT/sub (0.00s)\n"},
		{"skip", a, "TestT/sub", ""},
		{"output", a, "TestT", "--- PASS: TestT (0.00s)\n"},
		{"pass", a, "TestT", ""},
		{"output", a, "", "PASS\n"},
		{"output", a, "", "ok  \texample.com/m/a\t0.01s\n"},
		{"pass", a, "", ""},
		{"start", b, "", ""},
		{"output", b, "TestBad", "=== RUN   TestBad\n"},
		{"output", b, "TestBad", "    b_test.go:5: got 1, want 2\n"},
		{"output", b, "TestBad", "--- FAIL: TestBad (0.00s)\n"},
		{"fail", b, "TestBad", ""},
		{"output", b, "TestQuiet", "=== RUN   TestQuiet\n"},
		{"output", b, "TestQuiet", "--- SKIP: TestQuiet (0.00s)\n"},
		{"skip", b, "TestQuiet", ""},
		{"output", b, "TestHang", "=== RUN   TestHang\n"},
		{"output", b, "TestHang", "panic: test timed out after 1s\n"}, // and no fail event
		{"output", b, "", "FAIL\n"},
		{"output", b, "", "FAIL\texample.com/m/b\t0.02s\n"},
		{"fail", b, "", ""},
	}) + "FAIL\n" + `{"ImportPath":"example.com/m/c","Action":"build-output","Output":"c.go:3:1: syntax error\n"}` + "\n"
	var out bytes.Buffer
	skips, failed, err := filter(strings.NewReader(in), &out)
	if err != nil || !failed {
		t.Fatalf("filter: failed %v, err %v", failed, err)
	}
	want := "ok  \texample.com/m/a\t0.01s\n" +
		"    b_test.go:5: got 1, want 2\n--- FAIL: TestBad (0.00s)\n" +
		"FAIL\nFAIL\texample.com/m/b\t0.02s\n" + "panic: test timed out after 1s\n" +
		"FAIL\n" + "c.go:3:1: syntax error\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	summary(&out, skips)
	want = "Skipped tests (3):\n" +
		"  example.com/m/a TestRoot: a_test.go:20: needs root\n" +
		"  example.com/m/a TestT/sub: a_test.go:30: no mpirun\n" +
		"  example.com/m/b TestQuiet: (no reason given)\n"
	if out.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out.String(), want)
	}

	out.Reset()
	if _, failed, _ := filter(strings.NewReader(stream(t, [][4]string{{"pass", a, "", ""}})), &out); failed {
		t.Error("a passing run counted as failed")
	}
	out.Reset()
	summary(&out, nil)
	if out.String() != "Skipped tests: none\n" {
		t.Errorf("empty summary %q", out.String())
	}
}
