package launch

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseHosts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Host
	}{
		{"h1:4,h2:4", []Host{{"h1", 4}, {"h2", 4}}},
		{"h1", []Host{{"h1", 1}}},
		{"h1,h1,h2", []Host{{"h1", 2}, {"h2", 1}}},
		{"h1:2,h1", []Host{{"h1", 3}}},
		{"h2,h1:3,h2:2", []Host{{"h2", 3}, {"h1", 3}}},
		{" a , b:2 ", []Host{{"a", 1}, {"b", 2}}},
		{"10.0.0.1:8,10.0.0.2:8", []Host{{"10.0.0.1", 8}, {"10.0.0.2", 8}}},
		{"[fe80::1]:2,[::1],[fe80::1]", []Host{{"fe80::1", 3}, {"::1", 1}}},
		{"[fe80::1%eth0]:4", []Host{{"fe80::1%eth0", 4}}},
		{"alice@gpu7:8", []Host{{"alice@gpu7", 8}}},
		{"h:007", []Host{{"h", 7}}},
		{"h:1048576", []Host{{"h", MaxSlots}}},
	} {
		got, err := ParseHosts(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseHosts(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseHostsErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty host list"},
		{"  ", "empty host list"},
		{"a,,b", `entry 2 "": empty host name`},
		{"a,", `entry 2 "": empty host name`},
		{":4", `entry 1 ":4": empty host name`},
		{"h1:x", `entry 1 "h1:x": slots "x" is not a positive integer`},
		{"h1:4,h2:0", `entry 2 "h2:0": slots "0"`},
		{"h1:-1", `slots "-1"`},
		{"h1:+1", `slots "+1"`},
		{"h1:", `slots ""`},
		{"h1:1048577", `slots "1048577"`},
		{"h:1048576,h:1", "h: more than 1048576 slots"},
		{"fe80::1:2", `"fe80::1:2": more than one ':'`},
		{"[fe80::1", `"[fe80::1": '[' without ']'`},
		{"[gpu1]:2", `"gpu1" in brackets is not an IPv6 address`},
		{"[10.0.0.1]", `"10.0.0.1" in brackets is not an IPv6 address`},
		{"[::1]x", `"x" after ']'`},
		{"[::1]:y", `slots "y"`},
		{"-oProxyCommand", `"-oProxyCommand" starts with '-'`},
		{"a b", `contains ' '`},
		{"a#b", `contains '#'`},
		{"a]b", `contains ']'`},
		{"a\x00b", `contains '\x00'`},
		{"\xff", "not valid UTF-8"},
		{strings.Repeat("n", 256), "256 bytes is longer than 255"},
	} {
		got, err := ParseHosts(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseHosts(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.want)
		}
	}
}

const testHostfile = `# cluster of the lab
node01 slots=4
node02   slots = 4     # trailing comment
node03
node03

node04 max_slots=2
node05 slots=2 max-slots=8
	node06	count=3	
[fe80::1] slots=2
fe80::2 cpu=2
alice@node07 slots=1 slots_max=1
node01
#node99 slots=100
`

func TestParseHostfile(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Host
	}{
		{"sample", testHostfile, []Host{
			{"node01", 5}, {"node02", 4}, {"node03", 2}, {"node04", 2}, {"node05", 2},
			{"node06", 3}, {"fe80::1", 2}, {"fe80::2", 2}, {"alice@node07", 1},
		}},
		{"repeated counts add up", "a slots=2\na slots=3\n", []Host{{"a", 5}}},
		{"no final newline", "a\nb slots=2", []Host{{"a", 1}, {"b", 2}}},
		{"crlf", "a slots=2\r\nb\r\n", []Host{{"a", 2}, {"b", 1}}},
		{"comment glued to count", "a slots=2#x\n", []Host{{"a", 2}}},
		{"equals spacing", "a slots =3\nb slots= 4\n", []Host{{"a", 3}, {"b", 4}}},
	} {
		got, err := ParseHostfile(strings.NewReader(tc.in), "hosts.txt")
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: ParseHostfile = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestParseHostfileErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a slots=x\n", "launch: hostfile hosts.txt:1: slots=x is not a positive integer"},
		{"# c\n\na slots=0\n", "hosts.txt:3: slots=0 is not a positive integer"},
		{"a slots=-2\n", "hosts.txt:1: slots=-2"},
		{"a slots=\n", "hosts.txt:1: slots= is not"},
		{"a max_slots=y\n", "hosts.txt:1: max_slots=y is not"},
		{"a\nb foo=1\n", `hosts.txt:2: unknown key "foo" in foo=1`},
		{"a slots\n", `hosts.txt:1: "slots" after the host name is not KEY=VALUE`},
		{"a 4\n", `"4" after the host name`},
		{"slots=2\n", "hosts.txt:1: slots=2 where a host name should be"},
		{"a slots=4 max_slots=2\n", "max_slots=2 is less than slots=4"},
		{"a slots=1 count=2\n", "count given twice"},
		{"a max_slots=1 max-slots=1\n", "max-slots given twice"},
		{"-a slots=1\n", `"-a" starts with '-'`},
		{"[zz] slots=1\n", `"zz" in brackets is not an IPv6 address`},
		{"a,b\n", `"a,b" contains ','`},
		{"node01:4\n", "hosts.txt:1: node01:4: a hostfile gives slots as NAME slots=N, not NAME:N"},
		{"a slots=1048576\na\n", "hosts.txt:2: host a: more than 1048576 slots"},
		{"# nothing\n\n", "launch: hostfile hosts.txt: no hosts"},
		{"", "hosts.txt: no hosts"},
		{"a\n" + strings.Repeat("b", 2<<20) + "\n", "hosts.txt:2: bufio.Scanner: token too long"},
	} {
		got, err := ParseHostfile(strings.NewReader(tc.in), "hosts.txt")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseHostfile(%.40q) = %v, %v; want an error containing %q", tc.in, got, err, tc.want)
		}
	}
	_, err := ParseHostfile(iotest.ErrReader(iotest.ErrTimeout), "pipe")
	if err == nil || !strings.Contains(err.Error(), "hostfile pipe:1: timeout") {
		t.Errorf("ParseHostfile(failing reader) = %v", err)
	}
}

func TestExpandHostlist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // space-separated
	}{
		{"node[01-04,07],gpu-a[1-2]-ib,login", "node01 node02 node03 node04 node07 gpu-a1-ib gpu-a2-ib login"},
		{"r[1-2]n[1-2]", "r1n1 r1n2 r2n1 r2n2"},
		{"r[1,3]-c[0-1]-n[7]", "r1-c0-n7 r1-c1-n7 r3-c0-n7 r3-c1-n7"},
		{"n[8-10]", "n8 n9 n10"},
		{"n[08-10]", "n08 n09 n10"},
		{"n[98-101]", "n98 n99 n100 n101"},
		{"n[098-101]", "n098 n099 n100 n101"},
		{"n[007]", "n007"},
		{"n[001-2]", "n001 n002"},
		{"n[0-1,010-011]", "n0 n1 n010 n011"},
		{"n[3-3]", "n3"},
		{"[1-3]", "1 2 3"},
		{"[1-2]x", "1x 2x"},
		{"a,b", "a b"},
		{"a,a", "a a"},
		{"  gpu[1-2]\n", "gpu1 gpu2"},
		{"login", "login"},
		{"dgx-a100-[007-009,012]", "dgx-a100-007 dgx-a100-008 dgx-a100-009 dgx-a100-012"},
		{"c[1-2].cluster.local", "c1.cluster.local c2.cluster.local"},
	} {
		got, err := ExpandHostlist(tc.in)
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("ExpandHostlist(%q) = %q, %v; want %s", tc.in, got, err, tc.want)
		}
	}

	// Exactly the cap.
	got, err := ExpandHostlist("n[0-65535]")
	if err != nil || len(got) != MaxHostlistNames || got[0] != "n0" || got[len(got)-1] != "n65535" {
		t.Errorf("ExpandHostlist(n[0-65535]): %d names, %v", len(got), err)
	}
	got, err = ExpandHostlist("a[0-255]b[0-127],c[0-32767]")
	if err != nil || len(got) != MaxHostlistNames {
		t.Errorf("ExpandHostlist(a[0-255]b[0-127],c[0-32767]): %d names, %v", len(got), err)
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	long := strings.Repeat("x", 250)
	for _, tc := range []struct{ in, want string }{
		{"", `launch: hostlist "": empty`},
		{"a,,b", "empty host name (name 2)"},
		{"a,", "empty host name (name 2)"},
		{",a", "empty host name (name 1)"},
		{"n[1-2", `hostlist "n[1-2": '[' without ']'`},
		{"n1-2]", "']' without '[' at byte 4"},
		{"n[[1]]", "nested '[' at byte 2"},
		{"n[1]]", "']' without '['"},
		{"n[]", "n[]: empty brackets"},
		{"n[1,,2]", "empty item in brackets"},
		{"n[1,]", "empty item in brackets"},
		{"node[5-3]", `node[5-3]: range "5-3" is reversed`},
		{"n[a]", `"a" in brackets is not NUM or LO-HI`},
		{"n[1-2-3]", `"1-2-3" in brackets`},
		{"n[-3]", `"-3" in brackets`},
		{"n[3-]", `"3-" in brackets`},
		{"n[+3]", `"+3" in brackets`},
		{"n[ 1]", `" 1" in brackets`},
		{"n[0-9999999999999999999]", `"0-9999999999999999999" in brackets`},
		{"n[0-65536]", "expands to more than 65536 names"},
		{"a[0-65535],b", "expands to more than 65536 names"},
		{"r[0-300]n[0-300]", "expands to more than 65536 names"},
		{"n[0-999999999999999999]", "expands to more than 65536 names"},
		{"n[0-999999999999999999,0-999999999999999999]", "expands to more than 65536 names"},
		{"a[0-99999]b[0-99999]c[0-99999]d[0-99999]", "expands to more than 65536 names"},
		{long + "[1-100000]", "names would be longer than 255 bytes"},
		{long + "[100000-100001]", "names would be longer than 255 bytes"},
		{long + "[000001-2]", "names would be longer than 255 bytes"},
		{strings.Repeat("y", 256), "names would be longer than 255 bytes"},
		{"a b", `"a b" contains ' '`},
		{"-n[1-2]", `"-n1" starts with '-'`},
		{"n#[1-2]", `contains '#'`},
		{"n=1", `contains '='`},
	} {
		got, err := ExpandHostlist(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ExpandHostlist(%.60q) = %d names, %v; want an error containing %q", tc.in, len(got), err, tc.want)
		}
	}
	// Padding makes no name longer than 255 bytes here: 250 + 5 digits.
	if got, err := ExpandHostlist(long + "[00001-00002]"); err != nil || len(got) != 2 || len(got[1]) != 255 {
		t.Errorf("ExpandHostlist(250 bytes + [00001-00002]) = %d names, %v", len(got), err)
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{
		"node[01-04,07],gpu-a[1-2]-ib,login", "r[1-2]n[1-2]", "n[0-65535]", "n[0-65536]",
		"a,,b", "n[1-2", "n[[1]]", "n[5-3]", "r[0-300]n[0-300]", "[0-9][0-9][0-9][0-9][0-9]",
		"n[0-999999999999999999]", "x[00001-00002]", "-a", "a b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ExpandHostlist(s)
		if err != nil {
			if got != nil {
				t.Fatalf("ExpandHostlist(%q) returned names with error %v", s, err)
			}
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("ExpandHostlist(%q): error %q does not name the expression", s, err)
			}
			return
		}
		if len(got) == 0 || len(got) > MaxHostlistNames {
			t.Fatalf("ExpandHostlist(%q): %d names", s, len(got))
		}
		for _, n := range got {
			if err := checkHostName(n); err != nil {
				t.Fatalf("ExpandHostlist(%q) gave %q: %v", s, n, err)
			}
		}
		if !strings.ContainsAny(s, "[]") {
			if want := strings.Split(strings.TrimSpace(s), ","); !reflect.DeepEqual(got, want) {
				t.Fatalf("ExpandHostlist(%q) = %q; want %q", s, got, want)
			}
		}
	})
}

func FuzzParseHosts(f *testing.F) {
	for _, s := range []string{
		"h1:4,h2:4", "h1,h1,h2", "[fe80::1]:2", "a,,b", "h:x", "fe80::1:2", "[::1]x",
		"h:1048576,h:1", "-x", " a , b ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseHosts(s)
		if err != nil {
			if got != nil {
				t.Fatalf("ParseHosts(%q) returned hosts with error %v", s, err)
			}
			return
		}
		entries := strings.Count(s, ",") + 1
		if len(got) == 0 || len(got) > entries {
			t.Fatalf("ParseHosts(%q): %d hosts from %d entries", s, len(got), entries)
		}
		seen := map[string]bool{}
		total := 0
		for _, h := range got {
			if seen[h.Name] {
				t.Fatalf("ParseHosts(%q): %s twice", s, h.Name)
			}
			seen[h.Name] = true
			if h.Slots < 1 || h.Slots > MaxSlots {
				t.Fatalf("ParseHosts(%q): %s has %d slots", s, h.Name, h.Slots)
			}
			if err := checkHostName(h.Name); err != nil {
				t.Fatalf("ParseHosts(%q) gave %q: %v", s, h.Name, err)
			}
			total += h.Slots
		}
		if total < entries {
			t.Fatalf("ParseHosts(%q): %d slots from %d entries", s, total, entries)
		}
	})
}

// envOf makes a lookup function over a fixed environment.
func envOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// with returns a copy of base with changes applied; a value of "-" removes
// the variable.
func with(base map[string]string, changes ...string) map[string]string {
	m := make(map[string]string, len(base))
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(changes); i += 2 {
		if changes[i+1] == "-" {
			delete(m, changes[i])
		} else {
			m[changes[i]] = changes[i+1]
		}
	}
	return m
}

// slurm2 is what srun -N2 --ntasks-per-node=1 gives the task on the second
// node (Slurm 23.02, job 4242, step 0).
var slurm2 = map[string]string{
	"SLURM_CLUSTER_NAME":        "lab",
	"SLURM_JOB_ID":              "4242",
	"SLURM_JOBID":               "4242",
	"SLURM_JOB_NODELIST":        "gpu[01-02]",
	"SLURM_JOB_NUM_NODES":       "2",
	"SLURM_NODELIST":            "gpu[01-02]",
	"SLURM_NNODES":              "2",
	"SLURM_NTASKS":              "2",
	"SLURM_NPROCS":              "2",
	"SLURM_TASKS_PER_NODE":      "1(x2)",
	"SLURM_STEP_ID":             "0",
	"SLURM_STEPID":              "0",
	"SLURM_STEP_NODELIST":       "gpu[01-02]",
	"SLURM_STEP_NUM_NODES":      "2",
	"SLURM_STEP_NUM_TASKS":      "2",
	"SLURM_STEP_TASKS_PER_NODE": "1(x2)",
	"SLURM_NODEID":              "1",
	"SLURM_PROCID":              "1",
	"SLURM_LOCALID":             "0",
	"SLURMD_NODENAME":           "gpu02",
	"SLURM_SUBMIT_HOST":         "login1",
}

// slurm4 is the third step of job 1234567 on four nodes of an eight-node
// allocation, seen on the last of them, from a Slurm that sets
// SLURM_STEP_NODEID.
var slurm4 = map[string]string{
	"SLURM_JOB_ID":              "1234567",
	"SLURM_JOB_NODELIST":        "dgx-a100-[001-012]",
	"SLURM_JOB_NUM_NODES":       "12",
	"SLURM_STEP_ID":             "3",
	"SLURM_STEP_NODELIST":       "dgx-a100-[007-009,012]",
	"SLURM_STEP_NUM_NODES":      "4",
	"SLURM_STEP_NUM_TASKS":      "4",
	"SLURM_STEP_TASKS_PER_NODE": "1(x4)",
	"SLURM_STEP_NODEID":         "3",
	"SLURM_NODEID":              "3",
	"SLURM_PROCID":              "3",
	"SLURMD_NODENAME":           "dgx-a100-012",
}

func TestDetectNodeEnvSlurm(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want NodeEnv
	}{
		{"2 nodes", slurm2, NodeEnv{Source: "slurm", NNodes: 2, NodeRank: 1, MasterAddr: "gpu01",
			MasterPort: 24242, JobID: "slurm-4242.0", Hosts: []string{"gpu01", "gpu02"}}},
		{"4 padded nodes", slurm4, NodeEnv{Source: "slurm", NNodes: 4, NodeRank: 3, MasterAddr: "dgx-a100-007",
			MasterPort: 24567, JobID: "slurm-1234567.3",
			Hosts: []string{"dgx-a100-007", "dgx-a100-008", "dgx-a100-009", "dgx-a100-012"}}},
		{"MASTER_PORT", with(slurm2, "MASTER_PORT", "29500", "SLURM_NODEID", "0"), NodeEnv{Source: "slurm", NNodes: 2,
			MasterAddr: "gpu01", MasterPort: 29500, JobID: "slurm-4242.0", Hosts: []string{"gpu01", "gpu02"}}},
		{"old names only", with(slurm2, "SLURM_JOB_ID", "-", "SLURM_STEP_ID", "-", "SLURM_STEP_NUM_NODES", "-", "SLURM_STEP_NUM_TASKS", "-"),
			NodeEnv{Source: "slurm", NNodes: 2, NodeRank: 1, MasterAddr: "gpu01",
				MasterPort: 24242, JobID: "slurm-4242.0", Hosts: []string{"gpu01", "gpu02"}}},
		{"Slurm before torch and Kubeflow variables", with(slurm2, "MASTER_ADDR", "elsewhere", "WORLD_SIZE", "8", "RANK", "5", "PET_NNODES", "3"),
			NodeEnv{Source: "slurm", NNodes: 2, NodeRank: 1, MasterAddr: "gpu01",
				MasterPort: 24242, JobID: "slurm-4242.0", Hosts: []string{"gpu01", "gpu02"}}},
	} {
		got, ok, err := DetectNodeEnv(envOf(tc.env))
		if err != nil || !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: DetectNodeEnv = %+v, %v, %v; want %+v", tc.name, got, ok, err, tc.want)
		}
	}

	// Not a multi-node job: ok false, no error.
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"no variables", nil},
		{"batch script of a 4-node job", map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-4]",
			"SLURM_JOB_NUM_NODES": "4", "SLURM_NNODES": "4", "SLURM_NODEID": "0", "SLURM_PROCID": "0"}},
		{"one-node step", with(slurm2, "SLURM_STEP_NODELIST", "gpu02", "SLURM_STEP_NUM_NODES", "1",
			"SLURM_STEP_NUM_TASKS", "1", "SLURM_NODEID", "0")},
		{"blank node list", with(slurm2, "SLURM_STEP_NODELIST", " ", "MASTER_ADDR", "-")},
	} {
		got, ok, err := DetectNodeEnv(envOf(tc.env))
		if err != nil || ok {
			t.Errorf("%s: DetectNodeEnv = %+v, %v, %v; want not ok, no error", tc.name, got, ok, err)
		}
	}
}

func TestDetectNodeEnvSlurmErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"a task per GPU", with(slurm2, "SLURM_STEP_NUM_TASKS", "16"),
			"SLURM_STEP_NUM_TASKS=16 on 2 node(s): goccl run must run once per node and starts the ranks itself; run srun --ntasks-per-node=1 goccl run -n N PROG"},
		{"tasks on one node", with(slurm2, "SLURM_STEP_NODELIST", "gpu01", "SLURM_STEP_NUM_NODES", "1", "SLURM_STEP_NUM_TASKS", "4"),
			"SLURM_STEP_NUM_TASKS=4 on 1 node(s)"},
		{"bad task count", with(slurm2, "SLURM_STEP_NUM_TASKS", "two"), `SLURM_STEP_NUM_TASKS="two"`},
		{"node count disagrees", with(slurm2, "SLURM_STEP_NUM_NODES", "3"),
			`SLURM_STEP_NUM_NODES=3 but SLURM_STEP_NODELIST="gpu[01-02]" lists 2 nodes`},
		{"bad node count", with(slurm2, "SLURM_STEP_NUM_NODES", "x"), `SLURM_STEP_NUM_NODES="x"`},
		{"bad node list", with(slurm2, "SLURM_STEP_NODELIST", "gpu[01-02"), `SLURM_STEP_NODELIST: launch: hostlist "gpu[01-02": '[' without ']'`},
		{"repeated node", with(slurm2, "SLURM_STEP_NODELIST", "gpu01,gpu01"), `SLURM_STEP_NODELIST="gpu01,gpu01" lists gpu01 twice`},
		{"node id past the end", with(slurm2, "SLURM_NODEID", "2"), `SLURM_NODEID="2" is not an integer from 0 to 1`},
		{"negative node id", with(slurm2, "SLURM_NODEID", "-1"), `SLURM_NODEID="-1"`},
		{"bad step node id", with(slurm4, "SLURM_STEP_NODEID", "x"), `SLURM_STEP_NODEID="x"`},
		{"no node id", with(slurm2, "SLURM_NODEID", "-"), "neither SLURM_STEP_NODEID nor SLURM_NODEID"},
		{"no job id", with(slurm2, "SLURM_JOB_ID", "-", "SLURM_JOBID", "-"), "SLURM_JOB_ID is not"},
		{"bad job id", with(slurm2, "SLURM_JOB_ID", "42a"), `SLURM_JOB_ID="42a" is not a decimal job id`},
		{"no step id", with(slurm2, "SLURM_STEP_ID", "-", "SLURM_STEPID", "-"), "SLURM_STEP_ID is not"},
		{"bad step id", with(slurm2, "SLURM_STEP_ID", "batch"), `SLURM_STEP_ID="batch" is not a decimal step id`},
		{"bad MASTER_PORT", with(slurm2, "MASTER_PORT", "70000"), `MASTER_PORT="70000" is not an integer from 1 to 65535`},
		{"zero MASTER_PORT", with(slurm2, "MASTER_PORT", "0"), `MASTER_PORT="0"`},
	} {
		got, ok, err := DetectNodeEnv(envOf(tc.env))
		if err == nil || ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DetectNodeEnv = %+v, %v, %v; want an error containing %q", tc.name, got, ok, err, tc.want)
		}
	}
}

// pytorchJobWorker is what Kubeflow's training-operator (v1.7 and later)
// gives worker 0 of a PyTorchJob "mnist" of a Master and 1 Worker replica
// with nprocPerNode 4: WORLD_SIZE counts processes there, so the PET_
// variables must win.
var pytorchJobWorker = map[string]string{
	"PYTHONUNBUFFERED":   "1",
	"MASTER_PORT":        "23456",
	"PET_MASTER_PORT":    "23456",
	"MASTER_ADDR":        "mnist-master-0",
	"PET_MASTER_ADDR":    "mnist-master-0",
	"WORLD_SIZE":         "8",
	"RANK":               "1",
	"PET_NODE_RANK":      "1",
	"PET_NPROC_PER_NODE": "4",
	"PET_NNODES":         "2",
}

// trainJobNode is what Kubeflow Trainer (v2) gives node 2 of a 4-node
// TrainJob "llm" (PET_NODE_RANK comes from the job completion index).
var trainJobNode = map[string]string{
	"PET_NNODES":           "4",
	"PET_NPROC_PER_NODE":   "auto",
	"PET_NODE_RANK":        "2",
	"PET_MASTER_ADDR":      "llm-node-0-0.llm",
	"PET_MASTER_PORT":      "29400",
	"JOB_COMPLETION_INDEX": "2",
}

// jobSetPod is pod 1 of a JobSet "pytorch" whose one replicated Job
// "workers" runs 2 pods, the manifest setting MASTER_ADDR to pod 0's name
// under the JobSet's headless service; Kubernetes sets
// JOB_COMPLETION_INDEX.
var jobSetPod = map[string]string{
	"MASTER_ADDR":          "pytorch-workers-0-0.pytorch",
	"MASTER_PORT":          "3389",
	"WORLD_SIZE":           "2",
	"JOB_COMPLETION_INDEX": "1",
	"HOSTNAME":             "pytorch-workers-0-1",
}

func TestDetectNodeEnvKubernetes(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want NodeEnv
	}{
		{"PyTorchJob worker", pytorchJobWorker, NodeEnv{Source: "kubernetes", NNodes: 2, NodeRank: 1,
			MasterAddr: "mnist-master-0", MasterPort: 23456, JobID: "k8s-mnist-master-0-23456"}},
		{"PyTorchJob master", with(pytorchJobWorker, "RANK", "0", "PET_NODE_RANK", "0"), NodeEnv{Source: "kubernetes", NNodes: 2,
			MasterAddr: "mnist-master-0", MasterPort: 23456, JobID: "k8s-mnist-master-0-23456"}},
		{"TrainJob node", trainJobNode, NodeEnv{Source: "kubernetes", NNodes: 4, NodeRank: 2,
			MasterAddr: "llm-node-0-0.llm", MasterPort: 29400, JobID: "k8s-llm-node-0-0.llm-29400"}},
		{"static range", with(trainJobNode, "PET_NNODES", "4:4"), NodeEnv{Source: "kubernetes", NNodes: 4, NodeRank: 2,
			MasterAddr: "llm-node-0-0.llm", MasterPort: 29400, JobID: "k8s-llm-node-0-0.llm-29400"}},
		{"older PyTorchJob", map[string]string{"MASTER_ADDR": "mnist-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "2"},
			NodeEnv{Source: "kubernetes", NNodes: 3, NodeRank: 2, MasterAddr: "mnist-master-0", MasterPort: 23456, JobID: "k8s-mnist-master-0-23456"}},
		{"JobSet pod", jobSetPod, NodeEnv{Source: "kubernetes", NNodes: 2, NodeRank: 1,
			MasterAddr: "pytorch-workers-0-0.pytorch", MasterPort: 3389, JobID: "k8s-pytorch-workers-0-0.pytorch-3389"}},
		{"RANK before JOB_COMPLETION_INDEX", with(jobSetPod, "RANK", "0"), NodeEnv{Source: "kubernetes", NNodes: 2,
			MasterAddr: "pytorch-workers-0-0.pytorch", MasterPort: 3389, JobID: "k8s-pytorch-workers-0-0.pytorch-3389"}},
		{"IPv6 master", with(jobSetPod, "MASTER_ADDR", "[fd00::1]"), NodeEnv{Source: "kubernetes", NNodes: 2, NodeRank: 1,
			MasterAddr: "fd00::1", MasterPort: 3389, JobID: "k8s-fd00::1-3389"}},
	} {
		got, ok, err := DetectNodeEnv(envOf(tc.env))
		if err != nil || !ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: DetectNodeEnv = %+v, %v, %v; want %+v", tc.name, got, ok, err, tc.want)
		}
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"one PET node", map[string]string{"PET_NNODES": "1", "PET_NPROC_PER_NODE": "8"}},
		{"one PET node, static range", map[string]string{"PET_NNODES": "1:1"}},
		{"one pod", with(jobSetPod, "WORLD_SIZE", "1", "JOB_COMPLETION_INDEX", "0")},
		{"no WORLD_SIZE", with(jobSetPod, "WORLD_SIZE", "-")},
		{"no MASTER_ADDR", with(jobSetPod, "MASTER_ADDR", "-")},
		{"blank MASTER_PORT", with(jobSetPod, "MASTER_PORT", "  ")},
		{"no index", with(jobSetPod, "JOB_COMPLETION_INDEX", "-")},
		{"only JOB_COMPLETION_INDEX", map[string]string{"JOB_COMPLETION_INDEX": "3"}},
	} {
		got, ok, err := DetectNodeEnv(envOf(tc.env))
		if err != nil || ok {
			t.Errorf("%s: DetectNodeEnv = %+v, %v, %v; want not ok, no error", tc.name, got, ok, err)
		}
	}
}

func TestDetectNodeEnvKubernetesErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"elastic range", with(trainJobNode, "PET_NNODES", "1:4"), `PET_NNODES="1:4" is an elastic range`},
		{"bad PET_NNODES", with(trainJobNode, "PET_NNODES", "four"), `PET_NNODES="four" is not an integer`},
		{"bad static range", with(trainJobNode, "PET_NNODES", "x:x"), `PET_NNODES="x"`},
		{"no PET_NODE_RANK", with(trainJobNode, "PET_NODE_RANK", "-"), "PET_NNODES=4 is set but PET_NODE_RANK is not"},
		{"no PET_MASTER_ADDR", with(trainJobNode, "PET_MASTER_ADDR", "-"), "PET_NNODES=4 is set but PET_MASTER_ADDR is not"},
		{"no PET_MASTER_PORT", with(trainJobNode, "PET_MASTER_PORT", "-"), "PET_NNODES=4 is set but PET_MASTER_PORT is not"},
		{"PET_NODE_RANK past the end", with(trainJobNode, "PET_NODE_RANK", "4"), `PET_NODE_RANK="4" is not an integer from 0 to 3`},
		{"bad PET_MASTER_PORT", with(trainJobNode, "PET_MASTER_PORT", "0"), `PET_MASTER_PORT="0" is not an integer from 1 to 65535`},
		{"empty brackets", with(trainJobNode, "PET_MASTER_ADDR", "[]"), `PET_MASTER_ADDR="[]" is not a host`},
		{"blank in master", with(trainJobNode, "PET_MASTER_ADDR", "a b"), `PET_MASTER_ADDR="a b" is not a host`},
		{"bad WORLD_SIZE", with(jobSetPod, "WORLD_SIZE", "two"), `WORLD_SIZE="two"`},
		{"RANK past the end", with(jobSetPod, "RANK", "5"), `RANK="5" is not an integer from 0 to 1`},
		{"bad index", with(jobSetPod, "JOB_COMPLETION_INDEX", "x"), `JOB_COMPLETION_INDEX="x"`},
		{"bad MASTER_PORT", with(jobSetPod, "MASTER_PORT", "http"), `MASTER_PORT="http"`},
	} {
		got, ok, err := DetectNodeEnv(envOf(tc.env))
		if err == nil || ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DetectNodeEnv = %+v, %v, %v; want an error containing %q", tc.name, got, ok, err, tc.want)
		}
	}
}
