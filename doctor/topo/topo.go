// Package topo reads the matrix of `nvidia-smi topo -m` (`goccl doctor topo
// FILE`) and tells, for each GPU, the nearest NICs.
//
// `nvidia-smi topo -m` (NVIDIA driver tools) prints a matrix: a header line
// naming the devices (GPU0.., NIC0.. in current drivers, mlx5_0.. in older
// ones) followed by "CPU Affinity", "NUMA Affinity" and, in recent drivers,
// "GPU NUMA ID"; one row per device whose cells give the link between the
// row and column device:
//
//	        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
//	GPU0     X      NV4     PIX     64-71   1               N/A
//	NIC0    PIX     NODE     X
//
// then a Legend (X = self, NV# = # bonded NVLinks, PIX = at most one PCIe
// bridge, PXB = several PCIe bridges, PHB = through a PCIe host bridge,
// NODE = between host bridges of one NUMA node, SYS = across NUMA nodes;
// SOC is the old name of SYS) and a "NIC Legend" ("NIC0: mlx5_0"). Cells are
// separated by spaces or TABs (the raw form), the header may carry ANSI
// bold/underline sequences, NIC rows have no affinity columns, and pasted
// excerpts often end inside a row. The reader splits on white space, takes
// the first N cells that are valid link kinds as the row (N = number of
// devices), and the rest as CPU affinity, NUMA affinity and GPU NUMA ID.
//
// Locality: for each GPU the nearest NICs are those with the best link,
// ranked PIX < PXB < PHB < NODE < SYS (an NV# link to a NIC, as on systems
// with NVLink-attached NICs, ranks first). The GPU row's cell is used, the
// NIC row's cell for the same pair when the GPU row is cut short.
//
// The header is a line starting with a GPU column followed by another
// device column or, on a one-GPU machine, by the "CPU Affinity" or "NUMA
// Affinity" title.
//
// Finding codes (severity):
//
//	topo-no-matrix           warn   no matrix header in the input
//	topo-truncated-rows      info   rows with fewer cells than devices
//	topo-missing-row         info   a GPU column without its row
//	topo-nic-legend-missing  info   NIC columns without a "NIC Legend" entry
//	topo-no-nics             info   the matrix lists no NIC
//	gpu-no-local-nic         warn   a GPU's nearest NIC is NODE or SYS away
//	gpu-nic-phb              info   a GPU's nearest NIC is PHB (beyond NCCL's default GDR level)
//	nic-shared               info   a NIC is the nearest of several GPUs
//	gpu-no-nvlink            info   a GPU without NVLink while others have it
package topo

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/goccl/goccl/doctor"
)

// Report is what Parse found.
type Report struct {
	// Devices are the matrix's column names in order.
	Devices []string `json:"devices"`
	GPUs    []string `json:"gpus"`
	NICs    []string `json:"nics"`
	// Matrix maps row device -> column device -> link kind (X, NV4, PIX,
	// PXB, PHB, NODE, SYS). Missing cells (truncated rows) are absent.
	Matrix map[string]map[string]string `json:"matrix"`
	// NICNames maps a NIC column (NIC0) to its device (mlx5_0) from the
	// NIC Legend; a column already named like a device maps to itself.
	NICNames     map[string]string `json:"nic_names"`
	CPUAffinity  map[string]string `json:"cpu_affinity,omitempty"`
	NUMAAffinity map[string]string `json:"numa_affinity,omitempty"`
	GPUNUMAID    map[string]string `json:"gpu_numa_id,omitempty"`
	// Truncated lists the rows with fewer cells than devices.
	Truncated []string         `json:"truncated,omitempty"`
	Locality  []GPULocality    `json:"locality"`
	Findings  []doctor.Finding `json:"findings"`
}

// GPULocality is one GPU's nearest NICs.
type GPULocality struct {
	GPU  string `json:"gpu"`
	Link string `json:"link"` // the best link kind, "" when no NIC cell is known
	// NICs are the NIC columns at that link, NICDevices their device names.
	NICs       []string `json:"nics"`
	NICDevices []string `json:"nic_devices"`
}

var (
	topoNVRe     = regexp.MustCompile(`^NV\d+$`)
	topoLegendRe = regexp.MustCompile(`^(NIC\d+)\s*:\s*(\S+)$`)
	topoGPURe    = regexp.MustCompile(`^GPU\d+$`)
)

// topoRank orders link kinds for locality; -1 for a non-link.
func topoRank(k string) int {
	switch {
	case k == "X":
		return 0
	case topoNVRe.MatchString(k):
		return 1
	}
	switch k {
	case "PIX":
		return 2
	case "PXB":
		return 3
	case "PHB":
		return 4
	case "NODE":
		return 5
	case "SYS", "SOC":
		return 6
	}
	return -1
}

// topoIsDevice reports whether a header token names a device column.
func topoIsDevice(s string) bool {
	if s == "" || len(s) > 64 || s == "CPU" || s == "NUMA" || s == "GPU" || s == "Affinity" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// topoIsHeader reports whether the fields of a line are the matrix header.
func topoIsHeader(f []string) bool {
	if len(f) < 2 || !topoGPURe.MatchString(f[0]) {
		return false
	}
	if topoIsDevice(f[1]) && topoRank(f[1]) < 0 {
		return true
	}
	return len(f) >= 3 && (f[1] == "CPU" || f[1] == "NUMA") && f[2] == "Affinity"
}

// Parse parses `nvidia-smi topo -m` output and reports GPU–NIC
// locality. It fails only when r fails; text without a matrix gives a
// report with a "topo-no-matrix" finding.
func Parse(r io.Reader) (*Report, error) {
	rep := &Report{Devices: []string{}, GPUs: []string{}, NICs: []string{},
		Matrix: map[string]map[string]string{}, NICNames: map[string]string{},
		Locality: []GPULocality{}, Findings: []doctor.Finding{}}
	index := map[string]bool{}
	inMatrix := false
	_, err := doctor.ReadLines(r, doctor.TableMaxLine, doctor.TableMaxLines, func(n int, raw string) {
		line := strings.TrimSpace(doctor.CleanLine(raw))
		f := strings.Fields(line)
		if len(f) == 0 {
			return
		}
		if m := topoLegendRe.FindStringSubmatch(line); m != nil {
			rep.NICNames[m[1]] = m[2]
			return
		}
		// Header: device names then the affinity titles; it starts with a
		// GPU (no row name) followed by another device or, on a one-GPU
		// machine, by the "CPU Affinity" or "NUMA Affinity" title.
		if !inMatrix && len(rep.Devices) == 0 && topoIsHeader(f) {
			for _, tok := range f {
				if !topoIsDevice(tok) {
					break
				}
				if index[tok] || len(rep.Devices) >= 256 {
					break
				}
				index[tok] = true
				rep.Devices = append(rep.Devices, tok)
			}
			inMatrix = true
			return
		}
		if !inMatrix {
			return
		}
		name := f[0]
		if !index[name] {
			if strings.HasPrefix(line, "Legend") {
				inMatrix = false
			}
			return
		}
		if _, dup := rep.Matrix[name]; dup {
			return
		}
		row := map[string]string{}
		i := 1
		for ; i < len(f) && i-1 < len(rep.Devices); i++ {
			if topoRank(f[i]) < 0 {
				break
			}
			row[rep.Devices[i-1]] = f[i]
		}
		rep.Matrix[name] = row
		if i-1 < len(rep.Devices) {
			rep.Truncated = append(rep.Truncated, name)
		}
		extra := f[i:]
		if i-1 == len(rep.Devices) && len(extra) > 0 {
			put := func(m *map[string]string, v string) {
				if *m == nil {
					*m = map[string]string{}
				}
				(*m)[name] = v
			}
			put(&rep.CPUAffinity, extra[0])
			if len(extra) > 1 {
				put(&rep.NUMAAffinity, extra[1])
			}
			if len(extra) > 2 {
				put(&rep.GPUNUMAID, extra[2])
			}
		}
	})
	if err != nil {
		return nil, err
	}
	for _, d := range rep.Devices {
		if topoGPURe.MatchString(d) {
			rep.GPUs = append(rep.GPUs, d)
		} else {
			rep.NICs = append(rep.NICs, d)
			if _, ok := rep.NICNames[d]; !ok && !strings.HasPrefix(d, "NIC") {
				rep.NICNames[d] = d
			}
		}
	}
	topoAnalyse(rep)
	doctor.SortFindings(rep.Findings)
	return rep, nil
}

// topoLink returns the link between a and b, from a's row or else b's.
func (rep *Report) topoLink(a, b string) string {
	if k, ok := rep.Matrix[a][b]; ok {
		return k
	}
	return rep.Matrix[b][a]
}

// topoNICName is a NIC column with its device name, e.g. "NIC1 (mlx5_1)".
func (rep *Report) topoNICName(nic string) string {
	if d, ok := rep.NICNames[nic]; ok && d != nic {
		return nic + " (" + d + ")"
	}
	return nic
}

func topoAnalyse(rep *Report) {
	add := func(sev doctor.Severity, code, msg, fix string) {
		rep.Findings = append(rep.Findings, doctor.Finding{Severity: sev, Code: code, Message: msg, Fix: fix})
	}
	if len(rep.Devices) == 0 {
		add(doctor.SevWarn, "topo-no-matrix", "no `nvidia-smi topo -m` matrix found", "paste the output of `nvidia-smi topo -m` from its header line")
		return
	}
	if len(rep.Truncated) > 0 {
		add(doctor.SevInfo, "topo-truncated-rows", fmt.Sprintf("rows with fewer cells than the %d devices: %s; the missing pairs are taken from the other device's row where present", len(rep.Devices), strings.Join(rep.Truncated, ", ")), "")
	}
	for _, g := range rep.GPUs {
		if _, ok := rep.Matrix[g]; !ok {
			add(doctor.SevInfo, "topo-missing-row", fmt.Sprintf("no row for %s (truncated paste?)", g), "")
		}
	}
	missingLegend := []string{}
	for _, n := range rep.NICs {
		if _, ok := rep.NICNames[n]; !ok {
			missingLegend = append(missingLegend, n)
		}
	}
	if len(missingLegend) > 0 {
		add(doctor.SevInfo, "topo-nic-legend-missing", fmt.Sprintf("no NIC Legend entry for %s: device names unknown", strings.Join(missingLegend, ", ")), "include the 'NIC Legend' block printed after the matrix")
	}
	if len(rep.NICs) == 0 {
		add(doctor.SevInfo, "topo-no-nics", "the matrix lists no NIC: GPU–NIC locality cannot be judged", "")
	}
	users := map[string][]string{} // NIC -> GPUs for which it is nearest at PHB or better
	for _, g := range rep.GPUs {
		loc := GPULocality{GPU: g, NICs: []string{}, NICDevices: []string{}}
		best := 99
		for _, n := range rep.NICs {
			k := rep.topoLink(g, n)
			rk := topoRank(k)
			if rk <= 0 {
				continue
			}
			if rk < best {
				best, loc.Link, loc.NICs = rk, k, nil
			}
			if rk == best {
				loc.NICs = append(loc.NICs, n)
			}
		}
		if loc.NICs == nil {
			loc.NICs = []string{}
		}
		for _, n := range loc.NICs {
			loc.NICDevices = append(loc.NICDevices, rep.NICNames[n])
			if best <= 4 {
				users[n] = append(users[n], g)
			}
		}
		rep.Locality = append(rep.Locality, loc)
		if len(loc.NICs) == 0 {
			continue
		}
		names := make([]string, len(loc.NICs))
		for i, n := range loc.NICs {
			names[i] = rep.topoNICName(n)
		}
		switch {
		case best >= 5:
			add(doctor.SevWarn, "gpu-no-local-nic",
				fmt.Sprintf("%s: nearest NIC %s is %s: GPUDirect RDMA would cross the CPU interconnect, so NCCL stages network traffic through host memory", g, strings.Join(names, ", "), loc.Link),
				"put a NIC on the GPU's PCIe switch (PIX/PXB); forcing GDR with NCCL_NET_GDR_LEVEL="+loc.Link+" is possible but usually slower")
		case best == 4:
			add(doctor.SevInfo, "gpu-nic-phb",
				fmt.Sprintf("%s: nearest NIC %s is PHB (through the CPU's PCIe host bridge): NCCL's default GPUDirect RDMA level (NCCL_NET_GDR_LEVEL, PXB in recent versions) excludes it", g, strings.Join(names, ", ")),
				"measure with NCCL_NET_GDR_LEVEL=PHB against the default")
		}
	}
	// NICs nearest to several GPUs
	nics := make([]string, 0, len(users))
	for n := range users {
		nics = append(nics, n)
	}
	sort.Strings(nics)
	for _, n := range nics {
		if gs := users[n]; len(gs) > 1 {
			add(doctor.SevInfo, "nic-shared",
				fmt.Sprintf("%s is the nearest NIC of %d GPUs (%s): their inter-node traffic shares its bandwidth", rep.topoNICName(n), len(gs), strings.Join(gs, ", ")),
				"expect per-GPU network bandwidth of the NIC's rate divided by the GPUs sharing it")
		}
	}
	// GPUs without NVLink when others have it
	nvl := map[string]bool{}
	anyNV := false
	for _, a := range rep.GPUs {
		for _, b := range rep.GPUs {
			if a != b && topoNVRe.MatchString(rep.topoLink(a, b)) {
				nvl[a], anyNV = true, true
			}
		}
	}
	if anyNV {
		for _, g := range rep.GPUs {
			if !nvl[g] {
				add(doctor.SevInfo, "gpu-no-nvlink", fmt.Sprintf("%s has no NVLink to any other GPU while others do: its intra-node traffic goes over PCIe", g), "")
			}
		}
	}
}

// WriteText prints the matrix, each GPU's nearest NICs and the findings.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d GPUs, %d NICs\n", len(rep.GPUs), len(rep.NICs))
	if len(rep.Devices) > 0 {
		b.WriteString("      ")
		for _, d := range rep.Devices {
			fmt.Fprintf(&b, " %6s", doctor.OneLine(d, 6))
		}
		b.WriteByte('\n')
		for _, r := range rep.Devices {
			row, ok := rep.Matrix[r]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "%-6s", doctor.OneLine(r, 6))
			for _, c := range rep.Devices {
				k, ok := row[c]
				if !ok {
					k = "?"
				}
				fmt.Fprintf(&b, " %6s", k)
			}
			b.WriteByte('\n')
		}
	}
	for _, n := range rep.NICs {
		if d, ok := rep.NICNames[n]; ok && d != n {
			fmt.Fprintf(&b, "%s = %s\n", n, doctor.OneLine(d, 64))
		}
	}
	if len(rep.Locality) > 0 {
		b.WriteString("nearest NIC per GPU:\n")
	}
	for _, l := range rep.Locality {
		if len(l.NICs) == 0 {
			fmt.Fprintf(&b, "  %-6s none known\n", l.GPU)
			continue
		}
		names := make([]string, len(l.NICs))
		for i, n := range l.NICs {
			names[i] = doctor.OneLine(rep.topoNICName(n), 80)
		}
		fmt.Fprintf(&b, "  %-6s %-4s %s\n", l.GPU, l.Link, strings.Join(names, ", "))
	}
	doctor.WriteFindings(&b, rep.Findings)
	_, err := io.WriteString(w, b.String())
	return err
}
