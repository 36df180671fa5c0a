package flightrec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"github.com/goccl/goccl/doctor"
)

// maxDump bounds what one dump file may hold (PyTorch's default ring of
// 2,000 entries with stack frames is a few MiB).
const maxDump = 256 << 20

// Dump is one rank's flight-recorder dump.
type Dump struct {
	Path    string           `json:"path"`
	Rank    int              `json:"rank"`
	Format  string           `json:"format"` // "json" or "pickle"
	Version string           `json:"version"`
	Lib     string           `json:"comm_lib_version,omitempty"`
	Groups  map[string]Group `json:"-"` // pg_config by process-group name
	Entries []Entry          `json:"-"`
}

// Group is a process group as a dump's pg_config describes it.
type Group struct {
	Name  string `json:"name"`
	Desc  string `json:"desc"`
	Ranks []int  `json:"ranks"` // global ranks, in the group's order
}

// Entry is one recorded operation, with PyTorch's keys.
type Entry struct {
	RecordID        int64     `json:"record_id"`
	ProcessGroup    []string  `json:"process_group"` // name, desc
	CollectiveSeqID int64     `json:"collective_seq_id"`
	P2PSeqID        int64     `json:"p2p_seq_id"`
	ProfilingName   string    `json:"profiling_name"`
	InputSizes      [][]int64 `json:"input_sizes"`
	InputDtypes     []string  `json:"input_dtypes"`
	OutputSizes     [][]int64 `json:"output_sizes"`
	OutputDtypes    []string  `json:"output_dtypes"`
	State           string    `json:"state"`
	TimeCreatedNs   int64     `json:"time_created_ns"`
	Retired         bool      `json:"retired"`
	IsP2P           bool      `json:"is_p2p"`
	Error           string    `json:"goccl_error"`
}

// pg is the entry's process-group name ("" if it has none).
func (e *Entry) pg() string {
	if len(e.ProcessGroup) == 0 {
		return ""
	}
	return e.ProcessGroup[0]
}

// op is the operation's name without the backend and the peers:
// "all_reduce", "send".
func (e *Entry) op() string {
	_, name, ok := strings.Cut(e.ProfilingName, ":")
	if !ok {
		name = e.ProfilingName
	}
	name, _, _ = strings.Cut(name, " ")
	return name
}

// rawDump is a dump as decoded, before its groups are parsed: pg_config's
// ranks are a string ("[0, 1]") in PyTorch's dumps, a list in some.
type rawDump struct {
	Version        json.RawMessage                       `json:"version"`
	CommLibVersion string                                `json:"comm_lib_version"`
	Rank           *int                                  `json:"rank"`
	PGConfig       map[string]map[string]json.RawMessage `json:"pg_config"`
	Entries        []Entry                               `json:"entries"`
}

// ReadFile reads a dump: PyTorch's pickle (its default) or JSON (PyTorch's
// dump_json, goccl's), told apart by the first byte. The rank is the
// dump's "rank" (goccl's) or else the number that ends the file's name
// (PyTorch names them PREFIX<rank>, e.g. nccl_trace_rank_3).
func ReadFile(path string) (*Dump, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDump+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDump {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, maxDump>>20)
	}
	d, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	d.Path = path
	if d.Rank < 0 {
		if d.Rank, err = rankFromName(path); err != nil {
			return nil, err
		}
	}
	return d, nil
}

var trailingNumber = regexp.MustCompile(`(\d+)$`)

// rankFromName is the number that ends path's base name, less its
// extension (fr-3.json, nccl_trace_rank_3).
func rankFromName(path string) (int, error) {
	base := filepath.Base(path)
	if ext := filepath.Ext(base); ext == ".json" || ext == ".pkl" || ext == ".pickle" {
		base = strings.TrimSuffix(base, ext)
	}
	m := trailingNumber.FindString(base)
	if m == "" {
		return 0, fmt.Errorf("%s: the dump does not say its rank and its name does not end with one (PyTorch names dumps PREFIX<rank>)", path)
	}
	return strconv.Atoi(m)
}

// Parse decodes a dump from its bytes; its Rank is -1 when the dump does
// not say it.
func Parse(b []byte) (d *Dump, err error) {
	var raw rawDump
	format := "json"
	if len(b) > 0 && b[0] == 0x80 { // pickle protocol 2 and later start with PROTO
		format = "pickle"
		j, err := pickleToJSON(b)
		if err != nil {
			return nil, fmt.Errorf("reading the pickle: %w", err)
		}
		b = j
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not a flight-recorder dump (%s): %w", format, err)
	}
	if raw.Version == nil {
		return nil, errors.New("not a flight-recorder dump: no \"version\"")
	}
	d = &Dump{Rank: -1, Format: format, Lib: raw.CommLibVersion, Entries: raw.Entries, Groups: map[string]Group{}}
	if raw.Rank != nil {
		d.Rank = *raw.Rank
	}
	d.Version = strings.Trim(string(raw.Version), `"`)
	for name, cfg := range raw.PGConfig {
		g, err := parseGroup(name, cfg)
		if err != nil {
			return nil, err
		}
		d.Groups[name] = g
	}
	return d, nil
}

// parseGroup reads one pg_config entry: desc, and ranks as a string
// "[0, 1, 2]" or a list.
func parseGroup(name string, cfg map[string]json.RawMessage) (Group, error) {
	g := Group{Name: name}
	json.Unmarshal(cfg["desc"], &g.Desc)
	r := cfg["ranks"]
	var s string
	if json.Unmarshal(r, &s) == nil {
		r = json.RawMessage(s)
	}
	if err := json.Unmarshal(r, &g.Ranks); err != nil {
		return g, fmt.Errorf("pg_config %q: ranks %s: %w", name, cfg["ranks"], err)
	}
	return g, nil
}

// pickleToJSON decodes a pickle into the JSON of the same value: dicts
// become objects (keys as strings), tuples and lists arrays, None null.
// The lists PyTorch's pickler writes as calls to torch.jit._pickle's
// build_*list are their argument.
func pickleToJSON(b []byte) (j []byte, err error) {
	defer func() {
		if r := recover(); r != nil { // a malformed pickle must not crash the doctor
			err = fmt.Errorf("malformed pickle: %v", r)
		}
	}()
	u := pickle.NewUnpickler(bytes.NewReader(b))
	u.FindClass = func(module, name string) (interface{}, error) {
		if module == "torch.jit._pickle" && strings.HasPrefix(name, "build_") {
			return firstArg{}, nil
		}
		return nil, fmt.Errorf("pickle refers to %s.%s, which a flight-recorder dump does not", module, name)
	}
	v, err := u.Load()
	if err != nil {
		return nil, err
	}
	g, err := plain(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(g)
}

// firstArg is a callable that returns its first argument.
type firstArg struct{}

func (firstArg) Call(args ...interface{}) (interface{}, error) {
	if len(args) == 0 {
		return nil, errors.New("build_*list without an argument")
	}
	return args[0], nil
}

// plain converts an unpickled value to one encoding/json encodes.
func plain(v interface{}) (interface{}, error) {
	switch x := v.(type) {
	case nil, bool, string, int, int64, float64:
		return x, nil
	case *big.Int:
		return json.Number(x.String()), nil
	case *types.Dict:
		m := make(map[string]interface{}, x.Len())
		for _, e := range *x {
			val, err := plain(e.Value)
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(e.Key)] = val
		}
		return m, nil
	case *types.Tuple:
		return plainList(*x)
	case *types.List:
		return plainList(*x)
	case []byte:
		return string(x), nil
	}
	return nil, fmt.Errorf("unexpected pickled value of type %T", v)
}

func plainList(xs []interface{}) (interface{}, error) {
	out := make([]interface{}, len(xs))
	for i, x := range xs {
		v, err := plain(x)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// ReadPaths reads the dumps named: files, or directories whose every file
// is read (as PyTorch's fr_trace reads a folder of dumps). Two dumps of
// one rank and process group are an error.
func ReadPaths(paths []string) ([]*Dump, error) {
	files, err := doctor.ExpandPaths(paths, func(name string) bool { return !strings.HasSuffix(name, ".tmp") })
	if err != nil {
		return nil, err
	}
	var dumps []*Dump
	seen := map[string]string{} // rank and process group: the file
	for _, f := range files {
		d, err := ReadFile(f)
		if err != nil {
			return nil, err
		}
		for name := range d.Groups {
			key := strconv.Itoa(d.Rank) + "/" + name
			if prev, ok := seen[key]; ok {
				return nil, fmt.Errorf("%s and %s are both rank %d's dump of process group %q", prev, f, d.Rank, name)
			}
			seen[key] = f
		}
		dumps = append(dumps, d)
	}
	if len(dumps) == 0 {
		return nil, errors.New("no dump files")
	}
	sort.Slice(dumps, func(i, j int) bool { return dumps[i].Rank < dumps[j].Rank })
	return dumps, nil
}
