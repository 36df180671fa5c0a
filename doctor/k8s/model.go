// Package k8s is goccl's doctor for Kubernetes pods that run collectives:
// it reads `kubectl get pod -o json` (a Pod or a List), `-o yaml`,
// manifests (Pod, or a Deployment's, Job's or operator's pod template) and
// `kubectl describe pod` output, whole or pasted in pieces (event tables
// and kubectl prompts among them), and checks what RDMA and GPU
// communication in a pod needs:
//
//   - resources: GPUs (nvidia.com/gpu, amd.com/gpu, other *gpu*), RDMA
//     devices (the shared device plugin's rdma/*, *rdma*, *hca*) and other
//     network devices (SR-IOV VFs: openshift.io/*, intel.com/*,
//     mellanox.com/*), hugepages; pods the scheduler cannot place
//     ("Insufficient X");
//   - the container's security context: IPC_LOCK (or privileged), which
//     memory registration needs;
//   - /dev/shm (an emptyDir of medium Memory, its sizeLimit) and
//     /dev/infiniband mounts, hugepages volumes;
//   - Multus: the networks the pod asks for (k8s.v1.cni.cncf.io/networks)
//     against those attached (network-status: interface, IPs, the VF's PCI
//     address and RDMA device), sandbox (CNI) failures;
//   - NCCL_ and GOCCL_ variables that production jobs should not carry
//     (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1, NCCL_IB_DISABLE=1,
//     GOCCL_SHM_DISABLE=1);
//   - containers that keep failing (OOMKilled, CrashLoopBackOff).
//
// Finding codes: unschedulable, sandbox-failed, network-missing (error);
// no-ipc-lock, rdma-no-netdev, vf-not-attached, no-dev-shm,
// hugepages-unmounted, dangerous-env, container-failed (warn); shm-no-limit,
// gpu-no-rdma (info).
package k8s

import (
	"strings"
)

// Pod is what the readers gathered about one pod (or pod template).
// Fields a fragment does not show stay zero; the Known flags say what was
// seen, so that a check does not take "not shown" for "absent".
type Pod struct {
	File      string `json:"file"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Kind      string `json:"kind,omitempty"` // Pod, Deployment, ... ("" for describe and fragments)
	Node      string `json:"node,omitempty"`
	Phase     string `json:"phase,omitempty"`

	Containers []*Container       `json:"containers"`
	Volumes    map[string]*Volume `json:"volumes,omitempty"`
	HostNet    bool               `json:"host_network,omitempty"`
	Networks   []string           `json:"networks,omitempty"`       // asked for (k8s.v1.cni.cncf.io/networks)
	NetStatus  []Attachment       `json:"network_status,omitempty"` // attached (k8s.v1.cni.cncf.io/network-status)
	Events     []Event            `json:"events,omitempty"`         // warnings
	known      map[string]bool    // "metadata", "annotations", "network-status", "volumes"
	byName     map[string]*Container
}

// Container is one container of a pod.
type Container struct {
	Name       string            `json:"name"`
	Limits     map[string]string `json:"limits,omitempty"`
	Requests   map[string]string `json:"requests,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Mounts     map[string]string `json:"mounts,omitempty"` // path -> volume
	Privileged bool              `json:"privileged,omitempty"`
	IPCLock    bool              `json:"ipc_lock,omitempty"`
	Security   bool              `json:"security_context_seen,omitempty"` // a securityContext was shown
	MountsSeen bool              `json:"-"`                               // a mount list was shown
	State      string            `json:"state,omitempty"`                 // Waiting/Running/Terminated and reason
	LastState  string            `json:"last_state,omitempty"`
	Restarts   int               `json:"restarts,omitempty"`
}

// Volume is a pod volume as far as the checks care.
type Volume struct {
	Kind      string `json:"kind"` // emptyDir, hostPath, other
	Medium    string `json:"medium,omitempty"`
	SizeLimit string `json:"size_limit,omitempty"`
	Path      string `json:"path,omitempty"` // hostPath
}

// Attachment is one entry of Multus' network-status.
type Attachment struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface,omitempty"`
	IPs       []string `json:"ips,omitempty"`
	Default   bool     `json:"default,omitempty"`
	PCI       string   `json:"pci_address,omitempty"`
	RDMA      string   `json:"rdma_device,omitempty"`
}

// Event is a warning event (or a condition's message).
type Event struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func newPod(file string) *Pod {
	return &Pod{File: file, Volumes: map[string]*Volume{}, known: map[string]bool{}, byName: map[string]*Container{}}
}

// container returns the container named name, made on first use ("" is
// the container of a fragment that shows none).
func (p *Pod) container(name string) *Container {
	if c := p.byName[name]; c != nil {
		return c
	}
	c := &Container{Name: name, Limits: map[string]string{}, Requests: map[string]string{}, Env: map[string]string{}, Mounts: map[string]string{}}
	p.byName[name] = c
	p.Containers = append(p.Containers, c)
	return c
}

// empty says the pod holds nothing worth reporting.
func (p *Pod) empty() bool {
	return p.Name == "" && len(p.Containers) == 0 && len(p.Volumes) == 0 && len(p.Events) == 0 && len(p.NetStatus) == 0 && len(p.Networks) == 0
}

// Resource kinds.
const (
	resGPU      = "GPU"
	resRDMA     = "RDMA device"
	resNIC      = "network device"
	resHuge     = "hugepages"
	resStandard = ""
)

// kindOf classifies a resource name.
func kindOf(name string) string {
	n := strings.ToLower(name)
	switch {
	case strings.HasPrefix(n, "hugepages-"):
		return resHuge
	case !strings.Contains(n, "/") || strings.HasSuffix(n, "kubernetes.io/"):
		return resStandard // cpu, memory, ephemeral-storage
	case strings.Contains(n, "gpu") || strings.HasPrefix(n, "nvidia.com/mig-"):
		return resGPU
	case strings.HasPrefix(n, "rdma/") || strings.Contains(n, "rdma") || strings.Contains(n, "hca") || strings.Contains(n, "infiniband"):
		return resRDMA
	default:
		return resNIC
	}
}
