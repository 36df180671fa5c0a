package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
)

// Topology is a cluster as data (JSON; the schema is documented in docs/sim.md).
type Topology struct {
	Name        string  `json:"name"`
	Nodes       int     `json:"nodes"`         // hosts
	GPUsPerNode int     `json:"gpus_per_node"` // ranks per node
	Intra       Fabric  `json:"intra"`         // inside a node: NVLink/NVSwitch, PCIe or shared memory
	NICsPerNode int     `json:"nics_per_node"`
	NICGbps     float64 `json:"nic_gbps"` // per NIC, Gbit/s
	Network     Network `json:"network"`  // between nodes
	GPU         GPU     `json:"gpu"`      // runtime "nccl" systems only; may be empty
	Runtime     string  `json:"runtime"`  // "nccl" or "goccl"
}

// Fabric is the link of each GPU (rank) inside its node.
type Fabric struct {
	Kind      string  `json:"kind"`       // nvswitch, nvlink, pcie, shm
	GBps      float64 `json:"GBps"`       // per GPU, unidirectional, GB/s = 1e9 B/s
	LatencyUs float64 `json:"latency_us"` // one message, one way
	NVLS      bool    `json:"nvls"`       // in-switch reduction (NVSwitch only)
}

// Network is the fabric between nodes. The closed form uses its kind,
// latency, oversubscription and SHARP; the flow level builds its shape
// (the fields after SHARP; 0 takes the default docs/sim.md gives).
type Network struct {
	Kind             string  `json:"kind"`             // single-switch, fat-tree, rail-optimized, dragonfly
	LatencyUs        float64 `json:"latency_us"`       // one way, NIC to NIC
	Oversubscription float64 `json:"oversubscription"` // a leaf's down:up ports; 1 = non-blocking
	SHARP            bool    `json:"sharp"`            // in-network reduction (CollNet)

	Tiers               int     `json:"tiers,omitempty"`                // fat-tree, rail-optimized: 2 or 3 switch tiers
	Radix               int     `json:"radix,omitempty"`                // ports per switch
	NodesPerLeaf        int     `json:"nodes_per_leaf,omitempty"`       // nodes per leaf (dragonfly: per switch)
	LeavesPerPod        int     `json:"leaves_per_pod,omitempty"`       // 3 tiers: leaves under one pod's aggregation switches
	AggOversubscription float64 `json:"agg_oversubscription,omitempty"` // 3 tiers: an aggregation switch's down:up ports
	LinkGbps            float64 `json:"link_gbps,omitempty"`            // a switch-to-switch link, Gbit/s
	Groups              int     `json:"groups,omitempty"`               // dragonfly: groups
	SwitchesPerGroup    int     `json:"switches_per_group,omitempty"`   // dragonfly
	GlobalLinks         int     `json:"global_links,omitempty"`         // dragonfly: global links per switch
	GlobalGbps          float64 `json:"global_gbps,omitempty"`          // dragonfly: one global link, Gbit/s
}

// GPU is the accelerator: its name picks the NVLS efficiency of its
// generation; its peak rates are the roofline of a training step's and an
// inference's compute (datasheet figures, dense: no sparsity).
type GPU struct {
	Name    string  `json:"name"`
	TFLOPS  float64 `json:"tflops"`   // peak dense FP16/BF16 tensor-core rate, TFLOP/s = 1e12 FLOP/s
	HBMGBps float64 `json:"hbm_GBps"` // memory bandwidth, GB/s = 1e9 B/s
	MemGB   float64 `json:"mem_GB"`   // memory capacity, GB = 1e9 B
}

// The words the schema accepts.
var (
	FabricKinds  = []string{"nvswitch", "nvlink", "pcie", "shm"}
	NetworkKinds = []string{"single-switch", "fat-tree", "rail-optimized", "dragonfly"}
	Runtimes     = []string{"nccl", "goccl"}
)

// Load reads a Topology from JSON: unknown fields, trailing data and
// invalid values are errors naming the field and the value.
func Load(r io.Reader) (*Topology, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var t Topology
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("sim: topology: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("sim: topology: data after the JSON object")
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Validate reports the first field whose value the model cannot use.
func (t *Topology) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("sim: topology %q: %s = %v: %s", t.Name, field, v, want)
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	switch {
	case t.Nodes < 1:
		return bad("nodes", t.Nodes, "at least 1")
	case t.GPUsPerNode < 1:
		return bad("gpus_per_node", t.GPUsPerNode, "at least 1")
	case t.Nodes > math.MaxInt32/t.GPUsPerNode:
		return bad("nodes", t.Nodes, fmt.Sprintf("nodes × gpus_per_node must stay under %d", math.MaxInt32))
	case !oneOf(t.Intra.Kind, FabricKinds):
		return bad("intra.kind", fmt.Sprintf("%q", t.Intra.Kind), fmt.Sprintf("one of %v", FabricKinds))
	case !(t.Intra.GBps > 0) || !finite(t.Intra.GBps):
		return bad("intra.GBps", t.Intra.GBps, "a positive rate")
	case !(t.Intra.LatencyUs >= 0) || !finite(t.Intra.LatencyUs):
		return bad("intra.latency_us", t.Intra.LatencyUs, "zero or more")
	case t.Intra.NVLS && t.Intra.Kind != "nvswitch":
		return bad("intra.nvls", t.Intra.NVLS, fmt.Sprintf("needs intra.kind nvswitch, not %q", t.Intra.Kind))
	case t.Nodes > 1 && t.NICsPerNode < 1:
		return bad("nics_per_node", t.NICsPerNode, "at least 1 with several nodes")
	case t.NICsPerNode < 0:
		return bad("nics_per_node", t.NICsPerNode, "zero or more")
	case t.NICsPerNode > 0 && (!(t.NICGbps > 0) || !finite(t.NICGbps)):
		return bad("nic_gbps", t.NICGbps, "a positive rate")
	case t.Network.Kind != "" && !oneOf(t.Network.Kind, NetworkKinds) || t.Network.Kind == "" && t.Nodes > 1:
		return bad("network.kind", fmt.Sprintf("%q", t.Network.Kind), fmt.Sprintf("one of %v", NetworkKinds))
	case !(t.Network.LatencyUs >= 0) || !finite(t.Network.LatencyUs):
		return bad("network.latency_us", t.Network.LatencyUs, "zero or more")
	case t.Network.Oversubscription != 0 && (!(t.Network.Oversubscription >= 1) || !finite(t.Network.Oversubscription)):
		return bad("network.oversubscription", t.Network.Oversubscription, "1 (non-blocking) or more; 0 reads as 1")
	case t.Network.shapeError() != "":
		return fmt.Errorf("sim: topology %q: %s", t.Name, t.Network.shapeError())
	case !(t.GPU.TFLOPS >= 0) || !finite(t.GPU.TFLOPS):
		return bad("gpu.tflops", t.GPU.TFLOPS, "zero (unknown) or a positive rate")
	case !(t.GPU.HBMGBps >= 0) || !finite(t.GPU.HBMGBps):
		return bad("gpu.hbm_GBps", t.GPU.HBMGBps, "zero (unknown) or a positive rate")
	case !(t.GPU.MemGB >= 0) || !finite(t.GPU.MemGB):
		return bad("gpu.mem_GB", t.GPU.MemGB, "zero (unknown) or a positive size")
	case !oneOf(t.Runtime, Runtimes):
		return bad("runtime", fmt.Sprintf("%q", t.Runtime), fmt.Sprintf("one of %v", Runtimes))
	}
	return nil
}

// GPUs is the number of GPUs (ranks) of the topology.
func (t *Topology) GPUs() int { return t.Nodes * t.GPUsPerNode }

// WithNodes is a copy of t scaled to n nodes, named "NAME×n" (n < 1 is
// kept, for Validate to report).
func (t *Topology) WithNodes(n int) *Topology {
	c := *t
	c.Nodes = n
	if n != t.Nodes {
		c.Name = fmt.Sprintf("%s×%d", t.Name, n)
	}
	if n > 1 && c.Network.Kind == "" {
		c.Network.Kind = "fat-tree"
	}
	return &c
}

func oneOf(s string, set []string) bool { return slices.Contains(set, s) }
