// Package doctor holds what the goccl doctor readers share: the Finding
// each of them reports (severity, stable code, message, fix), the line
// reader that keeps memory bounded whatever the input, the cleaning of
// pasted table lines, the reading of NCCL's integer variables, and the
// folding, sorting and printing of findings.
//
// The readers are subpackages, one per input:
//
//	nccllog    NCCL debug logs (NCCL_DEBUG=INFO)
//	nccltests  nccl-tests and goccl perf tables
//	topo       nvidia-smi topo -m matrices
//	ibv        ibv_devinfo, ibstat, ibstatus and show_gids outputs
//	host       the live host: sysfs, /dev, the environment, the tools above
//	flightrec  flight-recorder dumps of every rank, goccl's and PyTorch's
//	k8s        Kubernetes pods: kubectl get -o json|yaml, describe, manifests
//	trace      PyTorch profiler (Kineto) traces of every rank
//
// Every reader takes the text as posted (launcher prefixes, ANSI remnants,
// interleaved lines) and never panics; each returns a report whose
// findings carry a severity, a stable code and a fix, and each package's
// doc lists the codes it emits. The subpackages import this package and
// it imports none of them, so the shared types live here rather than in a
// separate report package: there is no import cycle to break.
//
// The CLI is `goccl doctor nccl-log|nccl-tests|topo|ibv|host|flight-recorder|k8s|trace`, each with
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
	// Count is how many findings a Folder folded into this one, the first
	// of them (same severity, code and message but for its numbers), and
	// FirstLine and LastLine are the input lines of the first and the last
	// (0 when the reader gave none). All three are 0 for a finding that
	// was not repeated.
	Count     int `json:"count,omitempty"`
	FirstLine int `json:"first_line,omitempty"`
	LastLine  int `json:"last_line,omitempty"`
}

// Rank orders severities for sorting: 0 for errors, 1 for warnings, 2
// for the rest.
func (s Severity) Rank() int {
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
