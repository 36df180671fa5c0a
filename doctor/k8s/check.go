package k8s

import (
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/goccl/goccl/doctor"
	"github.com/goccl/goccl/internal/config"
)

// Report is the analysis of the pods read.
type Report struct {
	Pods     []*Pod           `json:"pods"`
	Findings []doctor.Finding `json:"findings"`
}

// ReadPaths reads every file named (a folder: its files).
func ReadPaths(paths []string) (*Report, error) {
	files, err := doctor.ExpandPaths(paths, func(string) bool { return true })
	if err != nil {
		return nil, err
	}
	rep := &Report{Pods: []*Pod{}, Findings: []doctor.Finding{}}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		pods, err := Read(fh, f)
		fh.Close()
		if err != nil {
			return nil, err
		}
		rep.Pods = append(rep.Pods, pods...)
	}
	for _, p := range rep.Pods {
		rep.Findings = append(rep.Findings, Check(p)...)
	}
	doctor.SortFindings(rep.Findings)
	return rep, nil
}

// dangerous are the variables the seeds call dangerous in production: they
// turn off the fast paths, and a job that carries one from debugging runs
// slowly with no error.
var dangerous = map[string]string{
	"NCCL_P2P_DISABLE":     "GPU peer-to-peer (NVLink, PCIe P2P) off: intra-node traffic goes through host memory",
	"NCCL_SHM_DISABLE":     "the shared-memory transport off: intra-node traffic goes through the network",
	"NCCL_IB_DISABLE":      "InfiniBand/RoCE off: inter-node traffic goes through TCP sockets",
	config.ShmDisable.Name: "goccl's shared-memory transport off: ranks on one host talk over TCP",
}

var insufficientRe = regexp.MustCompile(`Insufficient ([A-Za-z0-9./_-]+)`)

// Check returns the findings of one pod.
func Check(p *Pod) []doctor.Finding {
	var fs []doctor.Finding
	who := p.Name
	if who == "" {
		who = "(unnamed: " + p.File + ")"
	} else if p.Namespace != "" {
		who = p.Namespace + "/" + p.Name
	}
	add := func(sev doctor.Severity, code, fix, format string, a ...any) {
		fs = append(fs, doctor.Finding{Severity: sev, Code: code, Message: "pod " + who + ": " + fmt.Sprintf(format, a...), Fix: fix})
	}
	// Scheduling and sandbox failures.
	insufficient := map[string]int{}
	var sandbox string
	for _, e := range p.Events {
		for _, m := range insufficientRe.FindAllStringSubmatch(e.Message, -1) {
			insufficient[strings.TrimSuffix(m[1], ".")]++
		}
		if e.Reason == "FailedCreatePodSandBox" && sandbox == "" {
			sandbox = e.Message
		}
	}
	for _, res := range sortedKeys(insufficient) {
		fix := "no node has that many free: check the device plugin's pods on the nodes and that the node advertises the resource (kubectl get node -o jsonpath='{.status.allocatable}')"
		switch kindOf(res) {
		case resGPU:
			fix = "the NVIDIA device plugin must run on the GPU nodes (gpu-operator or k8s-device-plugin) and the node must advertise nvidia.com/gpu in allocatable; check node selectors and taints too"
		case resRDMA:
			fix = "the RDMA shared device plugin's config must select the node's RDMA devices (ifNames, vendors, devices) so that the node advertises the resource; check its pod's log"
		case resNIC:
			fix = "an SR-IOV resource advertised as 0 means no VFs were created or none matched the device plugin's selectors: create the VFs (sriov-network-operator policy, numVfs) and check the resource pool's selectors"
		}
		add(doctor.SevError, "unschedulable", fix, "the scheduler finds no node with enough %s (%s): \"Insufficient %s\" in %d event(s)", res, kindOf(res), res, insufficient[res])
	}
	if sandbox != "" {
		msg := sandbox
		if i := strings.Index(msg, "error adding container to network"); i >= 0 {
			msg = msg[i:]
		}
		add(doctor.SevError, "sandbox-failed",
			"a CNI plugin of the pod's networks failed: its message names the cause (for an InfiniBand VF a GUID must be set; for SR-IOV the VF's PCI address must come from the device plugin's resource); fix the network attachment, then delete the pod",
			"the pod sandbox could not be created: %s", clip(msg, 300))
	}
	// Networks asked for against attached.
	if p.known["network-status"] && len(p.Networks) > 0 {
		for _, want := range p.Networks {
			found := false
			for _, a := range p.NetStatus {
				if a.Name == want || strings.HasSuffix(a.Name, "/"+want) {
					found = true
				}
			}
			if !found {
				add(doctor.SevError, "network-missing", "the NetworkAttachmentDefinition must exist in the pod's namespace (or the one named) and its CNI must succeed: see the pod's events",
					"network %q is asked for (k8s.v1.cni.cncf.io/networks) but not attached (network-status lists %s)", want, statusNames(p.NetStatus))
			}
		}
	}
	devAttached := 0
	for _, a := range p.NetStatus {
		if a.PCI != "" {
			devAttached++
		}
	}
	for _, c := range p.Containers {
		cname := c.Name
		if cname == "" {
			cname = "(container)"
		}
		gpus, rdma, nics := 0, []string{}, []string{}
		nicCount := 0
		for res, q := range merged(c) {
			switch kindOf(res) {
			case resGPU:
				gpus += atoi(q)
			case resRDMA:
				rdma = append(rdma, res+"="+q)
				if !strings.HasPrefix(res, "rdma/") {
					nicCount += atoi(q)
				}
			case resNIC:
				nics = append(nics, res+"="+q)
				nicCount += atoi(q)
			case resHuge:
				if !hasMedium(p, c, "HugePages") && c.MountsSeen {
					add(doctor.SevWarn, "hugepages-unmounted", "mount an emptyDir of medium HugePages (e.g. at /dev/hugepages) for the pages requested",
						"container %s requests %s=%s but mounts no HugePages volume", cname, res, q)
				}
			}
		}
		sort.Strings(rdma)
		sort.Strings(nics)
		ibMount := c.Mounts["/dev/infiniband"] != ""
		if (len(rdma) > 0 || ibMount) && c.Security && !c.IPCLock && !c.Privileged {
			what := strings.Join(rdma, ", ")
			if what == "" {
				what = "/dev/infiniband"
			}
			add(doctor.SevWarn, "no-ipc-lock",
				"add capabilities: {add: [IPC_LOCK]} to the container's securityContext (or run it privileged): memory registration (ibv_reg_mr) pins memory, which needs it beyond the default locked-memory limit",
				"container %s has %s but its securityContext neither adds IPC_LOCK nor is privileged", cname, what)
		}
		for _, r := range rdma {
			if strings.HasPrefix(r, "rdma/") && p.known["metadata"] && len(p.Networks) == 0 && !p.HostNet {
				add(doctor.SevWarn, "rdma-no-netdev",
					"attach a secondary network on the RDMA device's interface with Multus (macvlan or ipvlan over it, as the network-operator's MacvlanNetwork does), or use hostNetwork",
					"container %s has the shared RDMA device %s but the pod asks for no network of its own (no k8s.v1.cni.cncf.io/networks): verbs work, but RDMA CM (ib_send_bw -R, rdma_cm) and RoCE GIDs need an interface of the device in the pod", cname, r)
				break
			}
		}
		if nicCount > 0 && p.known["network-status"] && devAttached < nicCount {
			add(doctor.SevWarn, "vf-not-attached",
				"each VF requested needs a network in k8s.v1.cni.cncf.io/networks whose NetworkAttachmentDefinition names the resource (k8s.v1.cni.cncf.io/resourceName); list the network once per VF",
				"container %s requests %d device(s) (%s) but network-status shows %d attached with a PCI device", cname, nicCount, strings.Join(append(nics, rdma...), ", "), devAttached)
		}
		shm := c.Mounts["/dev/shm"]
		nccl := anyPrefix(c.Env, "NCCL_", config.Prefix)
		if shm != "" {
			if v := p.Volumes[shm]; v != nil && v.Kind == "emptyDir" && strings.EqualFold(v.Medium, "Memory") && v.SizeLimit == "" {
				add(doctor.SevInfo, "shm-no-limit",
					"give the volume a sizeLimit that covers NCCL's buffers (NCCL_BUFFSIZE × channels × local peers, GBs on 8-GPU nodes) and a memory limit above it: a full /dev/shm fails posix_fallocate with \"No space left on device\"",
					"/dev/shm of container %s is a memory-backed emptyDir (%s) without sizeLimit: it is sized by the pod's memory limit or the node's memory, and what it holds counts against the container's memory limit", cname, shm)
			}
		} else if c.MountsSeen && (gpus >= 2 || nccl) {
			add(doctor.SevWarn, "no-dev-shm",
				"mount an emptyDir {medium: Memory, sizeLimit: ...} at /dev/shm (or use hostIPC): the container runtime's default /dev/shm is 64 MiB",
				"container %s (%d GPUs%s) has no /dev/shm volume: NCCL's and goccl's shared-memory transports need more than the default 64 MiB", cname, gpus, map[bool]string{true: ", NCCL/goccl settings", false: ""}[nccl])
		}
		if gpus >= 2 && len(rdma) == 0 && len(nics) == 0 && !ibMount && !p.HostNet && hasResources(c) {
			add(doctor.SevInfo, "gpu-no-rdma",
				"for multi-node jobs request an RDMA device (rdma/..., an SR-IOV VF) or mount /dev/infiniband: without one NCCL falls back to TCP sockets (NET/Socket)",
				"container %s has %d GPUs but no RDMA or network device", cname, gpus)
		}
		for _, k := range sortedKeys(c.Env) {
			if why, ok := dangerous[k]; ok && c.Env[k] == "1" {
				add(doctor.SevWarn, "dangerous-env", "remove it from the production spec (it is a debugging switch) and measure with it unset",
					"container %s sets %s=1: %s", cname, k, why)
			}
		}
		for _, st := range []string{c.State, c.LastState} {
			for _, bad := range []string{"CrashLoopBackOff", "OOMKilled", "Error", "CreateContainerConfigError", "ImagePullBackOff"} {
				if strings.Contains(st, bad) {
					add(doctor.SevWarn, "container-failed", "kubectl logs --previous names the cause; OOMKilled: raise the memory limit (a memory-backed /dev/shm counts against it)",
						"container %s: %s (restarts %d)", cname, st, c.Restarts)
				}
			}
		}
	}
	return fs
}

func merged(c *Container) map[string]string {
	m := map[string]string{}
	for k, v := range c.Requests {
		m[k] = v
	}
	for k, v := range c.Limits {
		m[k] = v
	}
	return m
}

func hasResources(c *Container) bool { return len(c.Limits)+len(c.Requests) > 0 }

func hasMedium(p *Pod, c *Container, medium string) bool {
	for _, vol := range c.Mounts {
		if v := p.Volumes[vol]; v != nil && strings.EqualFold(v.Medium, medium) {
			return true
		}
	}
	return false
}

func anyPrefix(env map[string]string, prefixes ...string) bool {
	for k := range env {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
	}
	return false
}

func atoi(q string) int {
	n := 0
	for _, c := range strings.Trim(q, `"' `) {
		if c < '0' || c > '9' {
			return n
		}
		n = 10*n + int(c-'0')
	}
	return n
}

func statusNames(as []Attachment) string {
	var n []string
	for _, a := range as {
		n = append(n, a.Name)
	}
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ", ")
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// WriteText prints each pod and the findings.
func (rep *Report) WriteText(w io.Writer) error {
	for _, p := range rep.Pods {
		name := p.Name
		if name == "" {
			name = "(unnamed)"
		}
		if p.Namespace != "" {
			name = p.Namespace + "/" + name
		}
		fmt.Fprintf(w, "pod %s", name)
		if p.Kind != "" && p.Kind != "Pod" {
			fmt.Fprintf(w, " (%s template)", p.Kind)
		}
		if p.Phase != "" {
			fmt.Fprintf(w, " %s", p.Phase)
		}
		if p.Node != "" {
			fmt.Fprintf(w, " on %s", p.Node)
		}
		fmt.Fprintf(w, "  [%s]\n", p.File)
		for _, c := range p.Containers {
			var res []string
			for _, k := range sortedKeys(merged(c)) {
				if kd := kindOf(k); kd != resStandard {
					res = append(res, fmt.Sprintf("%s=%s (%s)", k, merged(c)[k], kd))
				}
			}
			var env []string
			for _, k := range sortedKeys(c.Env) {
				if strings.HasPrefix(k, "NCCL_") || strings.HasPrefix(k, config.Prefix) {
					env = append(env, k+"="+c.Env[k])
				}
			}
			name := c.Name
			if name == "" {
				name = "(container)"
			}
			fmt.Fprintf(w, "  %s: devices %s; IPC_LOCK %s; /dev/shm %s; env %s", name, orDash(strings.Join(res, ", ")),
				yesNo(c.IPCLock || c.Privileged, c.Security), orDash(c.Mounts["/dev/shm"]), orDash(strings.Join(env, " ")))
			if c.State != "" {
				fmt.Fprintf(w, "; %s", c.State)
			}
			fmt.Fprintln(w)
		}
		if len(p.Networks) > 0 || len(p.NetStatus) > 0 {
			var at []string
			for _, a := range p.NetStatus {
				s := a.Name
				if a.Interface != "" {
					s += " " + a.Interface
				}
				if len(a.IPs) > 0 {
					s += " " + strings.Join(a.IPs, ",")
				}
				if a.PCI != "" {
					s += " pci " + a.PCI
				}
				if a.RDMA != "" {
					s += " " + a.RDMA
				}
				at = append(at, s)
			}
			fmt.Fprintf(w, "  networks asked %s; attached %s\n", orDash(strings.Join(p.Networks, ", ")), orDash(strings.Join(at, "; ")))
		}
	}
	return doctor.WriteFindings(w, rep.Findings)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(v, known bool) string {
	switch {
	case v:
		return "yes"
	case known:
		return "no"
	}
	return "?"
}
