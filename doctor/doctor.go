// Package doctor diagnoses communication setups: it reads NCCL debug logs
// (NCCL_DEBUG=INFO), nccl-tests and goccl perf tables, `nvidia-smi topo -m`
// matrices and ibv_devinfo/ibstat/ibstatus/show_gids outputs, and checks the
// live host (InfiniBand devices, GIDs, MTUs, /dev/shm, port range, NCCL_* and
// GOCCL_* environment). Every reader takes the text as posted (launcher
// prefixes, ANSI remnants, interleaved lines) and never panics; each returns
// a report whose findings carry a severity, a stable code and a fix.
//
// The CLI is `goccl doctor nccl-log|nccl-tests|topo|ibv|host`, each with
// --json printing the report as JSON.
package doctor

// Severity orders findings: Error means the job cannot work or is wrong,
// Warn means it works below what the hardware gives or will break elsewhere,
// Info is worth knowing.
type Severity string

// Finding severities.
const (
	SevError Severity = "error"
	SevWarn  Severity = "warn"
	SevInfo  Severity = "info"
)

// Finding is one diagnosis: Code is a stable kebab-case identifier for
// scripts (e.g. "socket-while-ib-listed"), Message says what was seen with
// the values involved (interface, HCA, env variable), Fix says what to do.
type Finding struct {
	Severity Severity `json:"severity"`
	Code     string   `json:"code"`
	Message  string   `json:"message"`
	Fix      string   `json:"fix,omitempty"`
}

// severityRank orders severities for sorting (errors first).
func severityRank(s Severity) int {
	switch s {
	case SevError:
		return 0
	case SevWarn:
		return 1
	default:
		return 2
	}
}

// HasErrors reports whether any finding has severity error.
func HasErrors(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == SevError {
			return true
		}
	}
	return false
}
