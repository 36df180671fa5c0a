package main

import (
	"encoding/json"
	"os"
)

// jsonReport is what -J writes: the configuration and one record per row.
type jsonReport struct {
	Collective   string       `json:"collective"`
	NRanks       int          `json:"nranks"`
	Config       jsonConfig   `json:"config"`
	Devices      []deviceInfo `json:"devices"`
	Results      []jsonRow    `json:"results"`
	Errors       int64        `json:"out_of_bounds_values"` // the "Out of bounds values" count
	AvgBusBW     float64      `json:"avg_busbw_gbs"`
	OK           bool         `json:"ok"`
	GocclVersion string       `json:"goccl_version"`
}

type jsonConfig struct {
	MinBytes    int64  `json:"min_bytes"`
	MaxBytes    int64  `json:"max_bytes"`
	StepFactor  int64  `json:"step_factor"`
	StepBytes   int64  `json:"step_bytes"`
	Iters       int    `json:"iters"`
	WarmupIters int    `json:"warmup_iters"`
	Check       int    `json:"check"`
	Op          string `json:"op"`
	Datatype    string `json:"datatype"`
	Root        int    `json:"root"`
	Average     int    `json:"average"`
}

type jsonRow struct {
	Collective string     `json:"collective"`
	Size       int64      `json:"size"`
	Count      int64      `json:"count"`
	Type       string     `json:"type"`
	Redop      string     `json:"redop"`
	Root       int        `json:"root"`
	OutOfPlace jsonResult `json:"out_of_place"`
	InPlace    jsonResult `json:"in_place"`
}

type jsonResult struct {
	TimeUs      float64 `json:"time_us"`
	AlgBW       float64 `json:"algbw_gbs"`
	BusBW       float64 `json:"busbw_gbs"`
	Wrong       *int64  `json:"wrong"` // null when not checked ("N/A")
	OutOfBounds int64   `json:"out_of_bounds"`
}

func writeJSON(path string, r *jsonReport) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
