package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The functions below reproduce nccl-tests' output (src/common.cu) byte for
// byte: the same printf widths and precisions, the same header lines.

// formatConfigLine is the first header line.
func formatConfigLine(minBytes, maxBytes, stepFactor, stepBytes int64, warmup, iters, aggIters, check int) string {
	step, unit := stepBytes, "bytes"
	if stepFactor > 1 {
		step, unit = stepFactor, "factor"
	}
	return fmt.Sprintf("# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d agg iters: %d validation: %d graph: 0",
		minBytes, maxBytes, step, unit, warmup, iters, aggIters, check)
}

// unalignSuffix ends the configuration line with -u as current nccl-tests
// does (" unalign: N"); older versions, whose line goccl perf prints
// otherwise, have none, so it is left out for -u 0.
func unalignSuffix(unalign int) string {
	if unalign == 0 {
		return ""
	}
	return fmt.Sprintf(" unalign: %d", unalign)
}

// deviceInfo describes one rank for the "# Using devices" block.
type deviceInfo struct {
	Rank   int    `json:"rank"`
	Pid    int    `json:"pid"`
	Host   string `json:"host"`
	Device int    `json:"device"` // the local rank
}

// formatDeviceLine is "#  Rank  0 Group  0 Pid   1234 on   hostname device  0 [cpu] goccl".
func formatDeviceLine(d deviceInfo) string {
	return fmt.Sprintf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s", d.Rank, 0, d.Pid, d.Host, d.Device, "cpu", "goccl")
}

// columnHeader returns the three column header lines.
func columnHeader() []string { return columnHeaderTime("time") }

// columnHeaderTime is columnHeader with the time columns named label
// ("cputime" with -C 1, as nccl-tests).
func columnHeaderTime(label string) []string {
	return []string{
		fmt.Sprintf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          ", "", "", "", "", ""),
		fmt.Sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s",
			"size", "count", "type", "redop", "root", label, "algbw", "busbw", "#wrong", label, "algbw", "busbw", "#wrong"),
		fmt.Sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s",
			"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
	}
}

// formatRowParams is the left part of a result row.
func formatRowParams(size, count int64, typeName, opName string, root int) string {
	return fmt.Sprintf("%12d  %12d  %8s  %6s  %6d", size, count, typeName, opName, root)
}

// formatTime prints microseconds with 2, 1 or 0 decimals as they grow.
func formatTime(us float64) string {
	switch {
	case us >= 10000:
		return fmt.Sprintf("%7.0f", us)
	case us >= 100:
		return fmt.Sprintf("%7.1f", us)
	}
	return fmt.Sprintf("%7.2f", us)
}

// formatResult is one half (out-of-place or in-place) of a result row;
// wrong < 0 prints "N/A" (not checked).
func formatResult(us, algbw, busbw float64, wrong int64) string {
	if wrong < 0 {
		return fmt.Sprintf("  %7s  %6.2f  %6.2f  %5s", formatTime(us), algbw, busbw, "N/A")
	}
	return fmt.Sprintf("  %7s  %6.2f  %6.2f  %5d", formatTime(us), algbw, busbw, wrong)
}

// footer returns the closing lines: out-of-bounds count, average bus
// bandwidth (C's %g), "#", and the empty line nccl-tests prints last.
func footer(errors int64, avgBusBW float64) []string {
	status := "OK"
	if errors != 0 {
		status = "FAILED"
	}
	return []string{
		fmt.Sprintf("# Out of bounds values : %d %s", errors, status),
		fmt.Sprintf("# Avg bus bandwidth    : %s %s", formatG(avgBusBW), ""),
		"#",
		"",
	}
}

// formatG formats v like C's printf("%g"): 6 significant digits, trailing
// zeros removed, exponent form below 1e-4 or from 1e6, at least two exponent
// digits.
func formatG(v float64) string {
	switch {
	case math.IsNaN(v):
		if math.Signbit(v) {
			return "-nan"
		}
		return "nan"
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case v == 0:
		if math.Signbit(v) {
			return "-0"
		}
		return "0"
	}
	const prec = 6
	// The exponent after rounding to prec significant digits decides the form.
	e := strconv.FormatFloat(v, 'e', prec-1, 64) // d.ddddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= prec {
		mant = trimZeros(mant)
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	return trimZeros(strconv.FormatFloat(v, 'f', prec-1-exp, 64))
}

func trimZeros(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
