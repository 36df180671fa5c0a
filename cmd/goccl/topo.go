package main

import (
	"fmt"
	"io"

	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/topo"
)

func init() {
	register(&command{
		name:    "topo",
		summary: "this host's topology: CPUs, NUMA nodes, interfaces, RDMA devices, GPUs (--json, --xml as NCCL_TOPO_DUMP_FILE)",
		usage:   "goccl topo [--json | --xml] [--root DIR]",
		run:     runTopo,
	})
}

var topoHelp = `usage: goccl topo [--json | --xml] [--root DIR]

Prints the topology of this host as a rank would see it (package topo): the
host name and identity (ranks with the same identity share memory), the CPU
model and online CPUs, this process's CPU set and the NUMA nodes it maps
to, every NUMA node's CPUs and memory, the network interfaces (kind, state,
speed, MTU, PCI device, NUMA node, the RDMA device that drives it,
addresses), the RDMA devices of /sys/class/infiniband (ports, state, link
layer, rate, netdev) and the GPUs nvidia-smi lists (none when it is not
installed). goccl's soft RoCE is user space and has no sysfs device.

  --json      the same as JSON
  --xml       NCCL's topology dump format (what NCCL_TOPO_DUMP_FILE writes):
              <system version="1"><cpu numaid affinity arch vendor ...><pci
              busid class ...><nic><net name dev speed port guid gdr/>...
  --root DIR  read /sys and /proc under DIR instead of / (a saved tree);
              no addresses and no nvidia-smi then

A job's topology, every host with its ranks, is written by Init when
` + config.TopoDumpFile.Name + ` is set (rank 0 writes; .json: JSON, else XML).
`

func runTopo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("goccl topo", stderr, func(fs *cliFlags) { fmt.Fprint(fs.Output(), topoHelp) })
	asJSON := fs.Bool("json", false, "")
	asXML := fs.Bool("xml", false, "")
	root := fs.String("root", "/", "")
	if status, exit := fs.parseOrExit(args); exit {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goccl topo: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *asJSON && *asXML {
		fmt.Fprintln(stderr, "goccl topo: --json and --xml exclude each other")
		return 2
	}
	h, err := topo.Detect(topo.Options{Root: *root})
	if err != nil {
		fmt.Fprintf(stderr, "goccl topo: %v\n", err)
		return 1
	}
	switch {
	case *asJSON:
		err = h.WriteJSON(stdout)
	case *asXML:
		err = h.WriteXML(stdout)
	default:
		err = h.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "goccl topo: %v\n", err)
		return 1
	}
	return 0
}
