package topo

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteText writes h as tables: the host and CPU, this process, the NUMA
// nodes, the network interfaces, the RDMA devices and the GPUs.
func (h *Host) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	fmt.Fprintf(ew, "host      %s (id %s)\n", or(h.Hostname, "?"), h.ID)
	cpu := h.Arch
	if h.CPU.Vendor != "" {
		cpu += " " + h.CPU.Vendor
	}
	if h.CPU.ModelName != "" {
		cpu += " " + strconv.Quote(h.CPU.ModelName)
	}
	if h.CPU.FamilyID >= 0 && h.CPU.Vendor != "" {
		cpu += fmt.Sprintf(" (NCCL familyid %d modelid %d)", h.CPU.FamilyID, h.CPU.ModelID)
	}
	fmt.Fprintf(ew, "cpu       %s, %d online (%s)\n", cpu, h.CPU.Count, or(h.CPU.Online, "?"))
	if p := h.Process; p != nil {
		fmt.Fprintf(ew, "process   pid %d, CPU set %s (%d), NUMA node(s) %s\n", p.Pid, or(p.CPUs, "?"), p.NCPUs, or(joinInts(p.NUMA), "-"))
	}

	fmt.Fprintln(ew)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	if len(h.NUMA) == 0 {
		fmt.Fprintln(tw, "NUMA: none listed (/sys/devices/system/node)")
	} else {
		fmt.Fprintln(tw, "NUMA\tCPUS\tCOUNT\tMEMORY")
		for _, n := range h.NUMA {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", n.ID, n.CPUs, n.NCPUs, bytesText(n.MemBytes))
		}
	}
	tw.Flush()

	fmt.Fprintln(ew)
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INTERFACE\tKIND\tSTATE\tSPEED\tMTU\tPCI\tNUMA\tRDMA\tADDRESSES")
	for _, i := range h.Interfaces {
		kind := i.Kind
		if i.Master != "" {
			kind += " (in " + i.Master + ")"
		} else if len(i.Slaves) > 0 {
			kind += " (" + strings.Join(i.Slaves, ",") + ")"
		}
		rdma := "-"
		if i.RDMA {
			rdma = fmt.Sprintf("%s/%d", i.RDMADevice, i.RDMAPort)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", i.Name, kind, or(i.State, "?"), speedText(i.SpeedMbps), i.MTU,
			or(i.BusID, "-"), numaText(i.NUMANode), rdma, or(strings.Join(i.Addrs, " "), "-"))
	}
	tw.Flush()
	if len(h.Rails) > 0 {
		var rs []string
		for _, r := range h.Rails {
			rs = append(rs, r.Iface+" "+r.Subnet)
		}
		fmt.Fprintf(ew, "rails     %d: %s\n", len(h.Rails), strings.Join(rs, ", "))
	}

	fmt.Fprintln(ew)
	if len(h.RDMA) == 0 {
		fmt.Fprintln(ew, "RDMA devices: none (/sys/class/infiniband is absent or empty)")
	} else {
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RDMA\tPORT\tSTATE\tLINK\tRATE\tNETDEV\tPCI\tNUMA\tFIRMWARE")
		for _, d := range h.RDMA {
			if len(d.Ports) == 0 {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\t%s\t%s\t%s\n", d.Name, or(strings.Join(d.Netdevs, ","), "-"), or(d.BusID, "-"), numaText(d.NUMANode), or(d.FWVer, "-"))
			}
			for _, p := range d.Ports {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, p.Port, or(p.State, "?"), linkText(p.LinkLayer), or(p.Rate, "-"),
					or(p.Netdev, "-"), or(d.BusID, "-"), numaText(d.NUMANode), or(d.FWVer, "-"))
			}
		}
		tw.Flush()
	}
	fmt.Fprintln(ew, "soft RoCE: available on any interface above (goccl roce, package rdma); it is user space, not a sysfs device, so not listed")

	fmt.Fprintln(ew)
	if len(h.GPUs) == 0 {
		if h.GPUQuery == "" {
			fmt.Fprintln(ew, "GPUs: none (nvidia-smi not found)")
		} else {
			fmt.Fprintln(ew, "GPUs: none (nvidia-smi lists none)")
		}
	} else {
		tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "GPU\tNAME\tMEMORY\tPCI\tNUMA")
		for _, g := range h.GPUs {
			fmt.Fprintf(tw, "%d\t%s\t%d MiB\t%s\t%s\n", g.Index, g.Name, g.MemoryMiB, g.BusID, numaText(g.NUMANode))
		}
		tw.Flush()
	}
	for _, n := range h.Notes {
		fmt.Fprintln(ew, "note: "+n)
	}
	return ew.err
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func numaText(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// speedText writes Mb/s as "100 Gb/s", "1 Gb/s", "100 Mb/s" or "unknown".
func speedText(mbps int) string {
	switch {
	case mbps <= 0:
		return "unknown"
	case mbps%1000 == 0:
		return strconv.Itoa(mbps/1000) + " Gb/s"
	case mbps > 1000:
		return strconv.FormatFloat(float64(mbps)/1000, 'f', -1, 64) + " Gb/s"
	}
	return strconv.Itoa(mbps) + " Mb/s"
}

func linkText(l string) string {
	if l == "Ethernet" {
		return "Ethernet (RoCE)"
	}
	return or(l, "?")
}

func bytesText(n uint64) string {
	if n == 0 {
		return "?"
	}
	const gib = 1 << 30
	if n >= gib {
		return strconv.FormatFloat(float64(n)/gib, 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 0, 64) + " MiB"
}
