package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// jsonReport is what -J writes: nccl-tests' JSON output (src/util.cu,
// version 3), key for key, with goccl's additions under "goccl" (and an
// out-of-bounds count per result). As in nccl-tests, the booleans of
// "config" and "out_of_bounds" are the strings "true" and "false", a
// result's root is the printed column ("%6i"), and nwrong is null when the
// result was not checked.
type jsonReport struct {
	Version     int         `json:"version"` // nccl-tests' JSON_FILE_VERSION
	StartTime   string      `json:"start_time"`
	Args        []string    `json:"args"`
	Env         []string    `json:"env"`
	NcclVersion int         `json:"nccl_version"` // 0: not NCCL
	Config      jsonConfig  `json:"config"`
	Results     []jsonRow   `json:"results"`
	OutOfBounds jsonOOB     `json:"out_of_bounds"`
	AvgBusBW    jsonAvgBW   `json:"average_bus_bandwidth"`
	Errors      []string    `json:"errors"`
	Goccl       jsonGocclEx `json:"goccl"`
	EndTime     string      `json:"end_time"`
}

// jsonFileVersion is nccl-tests' JSON_FILE_VERSION whose layout -J follows.
const jsonFileVersion = 3

// jsonTimeFormat is nccl-tests' TIME_STRING_FORMAT, "%Y-%m-%d %H:%M:%S".
const jsonTimeFormat = "2006-01-02 15:04:05"

type jsonConfig struct {
	NThreads             int          `json:"nthreads"`
	NGpus                int          `json:"ngpus"`
	MinimumBytes         int64        `json:"minimum_bytes"`
	MaximumBytes         int64        `json:"maximum_bytes"`
	StepFactor           *int64       `json:"step_factor,omitempty"` // one of the two, as the header's step
	StepBytes            *int64       `json:"step_bytes,omitempty"`
	WarmupIters          int          `json:"warmup_iters"`
	Iterations           int          `json:"iterations"`
	AggregatedIterations int          `json:"aggregated_iterations"`
	Validation           int          `json:"validation"`
	Graph                int          `json:"graph"`
	BlockingCollectives  cbool        `json:"blocking_collectives"`
	PerIterTiming        cbool        `json:"per_iter_timing"`
	PerIterSkip          int          `json:"per_iter_skip"`
	ParallelInit         cbool        `json:"parallel_init"`
	Devices              []jsonDevice `json:"devices"`
}

type jsonDevice struct {
	Rank       int    `json:"rank"`
	Group      int    `json:"group"`
	Pid        int    `json:"pid"`
	Hostname   string `json:"hostname"`
	Device     int    `json:"device"`      // the local rank
	DeviceHex  string `json:"device_hex"`  // "cpu"
	DeviceInfo string `json:"device_info"` // "goccl"
}

type jsonRow struct {
	Size             int64      `json:"size"`
	Count            int64      `json:"count"`
	Type             string     `json:"type"`
	Redop            string     `json:"redop"`
	Root             string     `json:"root"` // the printed column, "%6i"
	OutOfPlace       jsonResult `json:"out_of_place"`
	InPlace          jsonResult `json:"in_place"`
	ActualIterations int        `json:"actual_iterations"`
	ExperimentName   string     `json:"experiment_name"`
}

type jsonResult struct {
	Time        *float64 `json:"time,omitempty"`     // us; one of the two,
	CPUTime     *float64 `json:"cpu_time,omitempty"` // cpu_time with -C 1
	AlgBW       float64  `json:"alg_bw"`
	BusBW       float64  `json:"bus_bw"`
	NWrong      *float64 `json:"nwrong"`              // null when not checked ("N/A")
	OutOfBounds int64    `json:"goccl_out_of_bounds"` // elements written out of bounds
}

type jsonOOB struct {
	Count int64 `json:"count"`
	Okay  cbool `json:"okay"`
}

type jsonAvgBW struct {
	Bandwidth float64 `json:"bandwidth"`
	Okay      string  `json:"okay"` // "unchecked": goccl perf has no expected bandwidth
}

// jsonGocclEx is what goccl perf adds: what nccl-tests only has in "args".
type jsonGocclEx struct {
	Version      string   `json:"version"`
	Collective   string   `json:"collective"`
	NRanks       int      `json:"nranks"`
	Op           string   `json:"op"`
	Datatype     string   `json:"datatype"`
	Root         int      `json:"root"`
	Average      int      `json:"average"`
	Blocking     int      `json:"blocking"`
	TimeoutS     int      `json:"timeout_s"`
	RunCycles    int      `json:"run_cycles"`
	IgnoredFlags []string `json:"ignored_flags"`
}

// cbool is a boolean written as nccl-tests' jsonBool writes one: the string
// "true" or "false".
type cbool bool

func (b cbool) MarshalJSON() ([]byte, error) {
	if b {
		return []byte(`"true"`), nil
	}
	return []byte(`"false"`), nil
}

func (b *cbool) UnmarshalJSON(data []byte) error {
	switch strings.Trim(string(data), `"`) {
	case "true":
		*b = true
	case "false":
		*b = false
	default:
		return fmt.Errorf("not a boolean: %s", data)
	}
	return nil
}

// rootColumn is a root as nccl-tests prints it and writes it to JSON.
func rootColumn(root int) string { return fmt.Sprintf("%6d", root) }

// newJSONReport fills in what is known before the results.
func newJSONReport(cfg *perfConfig, nranks int, devs []deviceInfo, start time.Time) *jsonReport {
	r := &jsonReport{
		Version:   jsonFileVersion,
		StartTime: start.Format(jsonTimeFormat),
		Args:      os.Args,
		Env:       redactedEnv(os.Environ()),
		Config: jsonConfig{
			NThreads: 1, NGpus: 1, MinimumBytes: cfg.minBytes, MaximumBytes: cfg.maxBytes,
			WarmupIters: cfg.warmup, Iterations: cfg.iters, AggregatedIterations: cfg.aggIters,
			Validation: cfg.check, BlockingCollectives: cfg.blocking != 0,
		},
		Results: []jsonRow{},
		Errors:  []string{},
		Goccl: jsonGocclEx{
			Version: versionString(), Collective: cfg.coll.name, NRanks: nranks, Op: cfg.op, Datatype: cfg.dtype,
			Root: cfg.root, Average: cfg.average, Blocking: cfg.blocking, TimeoutS: cfg.timeout, RunCycles: cfg.runCycles,
			IgnoredFlags: []string{},
		},
		AvgBusBW: jsonAvgBW{Okay: "unchecked"},
	}
	if cfg.stepFactor > 1 {
		f := cfg.stepFactor
		r.Config.StepFactor = &f
	} else {
		s := cfg.stepBytes
		r.Config.StepBytes = &s
	}
	for _, d := range devs {
		r.Config.Devices = append(r.Config.Devices, jsonDevice{Rank: d.Rank, Pid: d.Pid, Hostname: d.Host, Device: d.Device, DeviceHex: "cpu", DeviceInfo: "goccl"})
	}
	for _, f := range cfg.ignored {
		if f.v != f.def {
			r.Goccl.IgnoredFlags = append(r.Goccl.IgnoredFlags, fmt.Sprintf("-%s %d", f.short, f.v))
		}
	}
	return r
}

// redactedEnv is the environment nccl-tests writes to "env", with the
// values of variables that look secret (a job token, a key) replaced.
func redactedEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		u := strings.ToUpper(name)
		for _, w := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"} {
			if strings.Contains(u, w) {
				kv = name + "=<redacted>"
				break
			}
		}
		out = append(out, kv)
	}
	return out
}

func writeJSON(path string, r *jsonReport) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
