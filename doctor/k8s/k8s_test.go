package k8s

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// verbatim is the text of a testdata file below its header (the source
// and what the thread says), as posted.
func verbatim(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	_, text, ok := strings.Cut(string(b), "# ===== VERBATIM BELOW =====\n")
	if !ok {
		t.Fatalf("%s: no verbatim marker", name)
	}
	return text
}

func read(t *testing.T, name, text string) ([]*Pod, []string) {
	t.Helper()
	pods, err := Read(strings.NewReader(text), name)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, p := range pods {
		for _, f := range Check(p) {
			codes = append(codes, f.Code)
		}
	}
	sort.Strings(codes)
	return pods, codes
}

// TestRealInputs: pods, manifests and describe output posted in public
// issue threads (each file's header gives the thread and its diagnosis),
// most of them cut short, read as far as they go.
func TestRealInputs(t *testing.T) {
	for _, tc := range []struct {
		file  string
		codes []string
		check func(t *testing.T, p *Pod)
	}{
		// The maintainer's answer: a shared RDMA device with no interface of
		// its own in the pod; RDMA CM needs one (Multus + macvlan).
		{"01-rdmashared108-pod-ipclock-no-secondary-net.txt", []string{"rdma-no-netdev"}, func(t *testing.T, p *Pod) {
			c := p.Containers[0]
			if p.Name != "rdma-test-node7" || c.Name != "app" || !c.IPCLock || c.Limits["rdma/rdma_shared_device_a"] != "1" || c.Limits["ten1010.io/gpu-nvidia-l40"] != "4" {
				t.Errorf("%+v %+v", p, c)
			}
		}},
		// Cut inside the network-status JSON: the resources are read.
		{"02-sriovnetop767-mlnxnics2-one-interface.txt", nil, func(t *testing.T, p *Pod) {
			if p.Containers[0].Requests["openshift.io/mlnxnics"] != "2" {
				t.Errorf("%+v", p.Containers[0])
			}
		}},
		{"03-sriovdp-pr530-network-status-rdma-device.txt", nil, func(t *testing.T, p *Pod) {
			want := []Attachment{{Name: "k8s-pod-network", IPs: []string{"192.168.107.206"}, Default: true},
				{Name: "default/sriov-net1", Interface: "net1", IPs: []string{"10.56.217.2"}, PCI: "0000:03:00.3", RDMA: "mlx5_4"}}
			if !reflect.DeepEqual(p.NetStatus, want) {
				t.Errorf("network-status %+v", p.NetStatus)
			}
		}},
		// The InfiniBand VF without a GUID fails the CNI.
		{"04-ibsriovcni66-ib-vf-guid-invalid.txt", []string{"sandbox-failed"}, func(t *testing.T, p *Pod) {
			if p.Name != "my-test-pod-fnjk7" || p.Phase != "Pending" || !reflect.DeepEqual(p.Networks, []string{"ib-sriov-network"}) ||
				p.Containers[0].Limits["mellanox.com/mlnx_sriov_rdma_ib"] != "1" || !strings.Contains(p.Containers[0].State, "ContainerCreating") {
				t.Errorf("%+v %+v", p, p.Containers[0])
			}
		}},
		{"05-sriovdp490-mlnx-sriov-rdma-vf-pci-addr-required.txt", nil, func(t *testing.T, p *Pod) {
			if p.Name != "testpod1" || !reflect.DeepEqual(p.Networks, []string{"sriovnet-fxp"}) || p.Containers[0].Requests["mellanox.com/mlnx_sriov_rdma"] != "1" {
				t.Errorf("%+v %+v", p, p.Containers[0])
			}
		}},
		{"06-k8sdp430-gpu-pending-insufficient.txt", nil, func(t *testing.T, p *Pod) {
			if p.Node != "" || p.Phase != "Pending" || p.Containers[0].Limits["nvidia.com/gpu"] != "1" {
				t.Errorf("%+v %+v", p, p.Containers[0])
			}
		}},
		// NCCL over IB failed unless the pod ran privileged: no IPC_LOCK.
		{"07-nccl1925-rdma-hca-unprivileged-deploy.txt", []string{"no-ipc-lock", "rdma-no-netdev"}, func(t *testing.T, p *Pod) {
			if p.Kind != "Deployment" || p.Name != "nccl-sleep" || p.Containers[0].Name != "nccl" {
				t.Errorf("%+v", p)
			}
		}},
		{"08-sglang20859-nccl-env-rdma-hca-shared.txt", nil, func(t *testing.T, p *Pod) {
			c := p.Containers[0]
			if c.Env["NCCL_IB_SL"] != "5" || c.Env["MOONCAKE_DEVICE"] != "mlx5_0" || c.Limits["rdma/hca_shared_devices_a"] != "1" || c.Limits["nvidia.com/gpu"] != "8" {
				t.Errorf("%+v", c)
			}
		}},
		// posix_fallocate failed in /dev/shm: memory-backed, no limit.
		{"09-nccl525-dshm-emptydir-no-sizelimit.txt", []string{"shm-no-limit"}, nil},
		{"10-siderolabs566-infiniband-hostpath-dshm.txt", []string{"shm-no-limit"}, func(t *testing.T, p *Pod) {
			if v := p.Volumes["infiniband"]; v == nil || v.Kind != "hostPath" || v.Path != "/dev/infiniband" || p.Containers[0].Mounts["/dev/infiniband"] != "infiniband" {
				t.Errorf("volumes %+v, mounts %+v", p.Volumes, p.Containers[0].Mounts)
			}
		}},
		{"11-dranet51-get-pod-o-yaml-infiniband-hostpath.txt", nil, nil},
		{"12-sriovdp127-insufficient-sriov-allocatable-zero.txt", []string{"unschedulable"}, nil},
		{"13-k8sdp283-failedscheduling-gpu-plus-pod-yaml.txt", []string{"unschedulable"}, func(t *testing.T, p *Pod) {
			if p.Name != "cuda-vector-add" || p.Containers[0].Env["NVIDIA_VISIBLE_DEVICES"] != "all" {
				t.Errorf("%+v %+v", p, p.Containers[0])
			}
		}},
	} {
		t.Run(tc.file[:2], func(t *testing.T) {
			pods, codes := read(t, tc.file, verbatim(t, tc.file))
			if !reflect.DeepEqual(codes, tc.codes) {
				t.Errorf("%s: findings %v, want %v", tc.file, codes, tc.codes)
			}
			if tc.check != nil {
				if len(pods) != 1 {
					t.Fatalf("%d pods", len(pods))
				}
				tc.check(t, pods[0])
			}
		})
	}
}

// podJSON is kubectl get pods -o json of two pods (a List, as kubectl
// prints it): a training worker with a VF asked twice and attached once,
// a network that is missing, no IPC_LOCK, no /dev/shm, NCCL_IB_DISABLE
// left on and an OOM kill; and a worker set up right.
const podJSON = `{
    "apiVersion": "v1",
    "items": [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "annotations": {
                    "k8s.v1.cni.cncf.io/network-status": "[{\n    \"name\": \"cbr0\",\n    \"interface\": \"eth0\",\n    \"ips\": [\n        \"10.244.1.7\"\n    ],\n    \"default\": true\n},{\n    \"name\": \"training/sriov-rdma\",\n    \"interface\": \"net1\",\n    \"ips\": [\n        \"192.168.100.11\"\n    ],\n    \"device-info\": {\n        \"type\": \"pci\",\n        \"version\": \"1.1.0\",\n        \"pci\": {\n            \"pci-address\": \"0000:3b:00.2\",\n            \"rdma-device\": \"mlx5_2\"\n        }\n    }\n}]",
                    "k8s.v1.cni.cncf.io/networks": "sriov-rdma,sriov-rdma2"
                },
                "name": "trainer-worker-0",
                "namespace": "training"
            },
            "spec": {
                "containers": [
                    {
                        "env": [
                            {"name": "NCCL_IB_DISABLE", "value": "1"},
                            {"name": "NCCL_DEBUG", "value": "INFO"}
                        ],
                        "name": "worker",
                        "resources": {
                            "limits": {"nvidia.com/gpu": "8", "openshift.io/mlnx_rdma_vf": "2", "hugepages-2Mi": "1Gi", "memory": "64Gi"},
                            "requests": {"nvidia.com/gpu": "8", "openshift.io/mlnx_rdma_vf": "2", "hugepages-2Mi": "1Gi", "memory": "64Gi"}
                        },
                        "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
                        "volumeMounts": [{"mountPath": "/data", "name": "data"}]
                    }
                ],
                "nodeName": "gpu-node-3",
                "volumes": [{"name": "data", "hostPath": {"path": "/data"}}]
            },
            "status": {
                "containerStatuses": [
                    {"name": "worker", "restartCount": 3, "ready": false,
                     "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
                ],
                "phase": "Running"
            }
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer-worker-1", "namespace": "training"},
            "spec": {
                "containers": [
                    {
                        "name": "worker",
                        "resources": {"limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}},
                        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                        "volumeMounts": [{"mountPath": "/dev/shm", "name": "dshm"}]
                    }
                ],
                "hostNetwork": true,
                "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]
            },
            "status": {"phase": "Running"}
        }
    ],
    "kind": "List",
    "metadata": {"resourceVersion": ""}
}`

// TestJSON: kubectl's JSON (written here in its layout: no real dump of a
// training pod with these settings was found in a public thread).
func TestJSON(t *testing.T) {
	pods, err := Read(strings.NewReader(podJSON), "pods.json")
	if err != nil || len(pods) != 2 {
		t.Fatalf("%d pods, %v", len(pods), err)
	}
	var codes []string
	for _, f := range Check(pods[0]) {
		codes = append(codes, f.Code)
		if !strings.Contains(f.Message, "training/trainer-worker-0") {
			t.Errorf("finding %q does not name the pod", f.Message)
		}
	}
	sort.Strings(codes)
	want := []string{"container-failed", "container-failed", "dangerous-env", "hugepages-unmounted", "network-missing", "no-dev-shm", "no-ipc-lock", "vf-not-attached"}
	if !reflect.DeepEqual(codes, want) {
		t.Errorf("worker-0: %v, want %v", codes, want)
	}
	if fs := Check(pods[1]); len(fs) != 0 {
		t.Errorf("worker-1, set up right: %+v", fs)
	}
	if a := pods[0].NetStatus; len(a) != 2 || a[1].RDMA != "mlx5_2" || a[1].PCI != "0000:3b:00.2" {
		t.Errorf("network-status %+v", a)
	}
}

// describe is kubectl describe pod's layout (kubectl 1.29) for a pod with
// the settings the JSON test's first pod has, in the sections describe
// shows.
const describe = `Name:             trainer-worker-0
Namespace:        training
Priority:         0
Service Account:  default
Node:             gpu-node-3/10.0.0.13
Start Time:       Mon, 02 Sep 2024 10:00:00 +0000
Labels:           app=trainer
Annotations:      k8s.v1.cni.cncf.io/network-status:
                    [{
                        "name": "cbr0",
                        "interface": "eth0",
                        "ips": [
                            "10.244.1.7"
                        ],
                        "default": true
                    }]
                  k8s.v1.cni.cncf.io/networks: sriov-rdma
Status:           Running
IP:               10.244.1.7
Containers:
  worker:
    Container ID:   containerd://0123
    Image:          nvcr.io/nvidia/pytorch:24.08-py3
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
    Ready:          False
    Restart Count:  3
    Limits:
      nvidia.com/gpu:             8
      rdma/rdma_shared_device_a:  1
    Requests:
      nvidia.com/gpu:             8
      rdma/rdma_shared_device_a:  1
    Environment:
      NCCL_P2P_DISABLE:  1
      NCCL_DEBUG:        INFO
    Mounts:
      /dev/shm from dshm (rw)
      /var/run/secrets/kubernetes.io/serviceaccount from kube-api-access-x2k9f (ro)
Conditions:
  Type              Status
  Initialized       True
  Ready             False
Volumes:
  dshm:
    Type:       EmptyDir (a temporary directory that shares a pod's lifetime)
    Medium:     Memory
    SizeLimit:  <unset>
QoS Class:       BestEffort
Events:
  Type     Reason   Age                From     Message
  ----     ------   ----               ----     -------
  Warning  BackOff  2m (x12 over 5m)   kubelet  Back-off restarting failed container worker in pod trainer-worker-0_training
`

// TestDescribe: describe's sections: containers' devices, variables,
// mounts, state; volumes; the annotations' network-status JSON.
func TestDescribe(t *testing.T) {
	pods, codes := read(t, "describe.txt", describe)
	p := pods[0]
	c := p.Containers[0]
	if p.Name != "trainer-worker-0" || p.Namespace != "training" || p.Phase != "Running" || c.Name != "worker" || c.Env["NCCL_P2P_DISABLE"] != "1" ||
		c.Mounts["/dev/shm"] != "dshm" || p.Volumes["dshm"] == nil || p.Volumes["dshm"].Medium != "Memory" || c.Restarts != 3 ||
		!strings.Contains(c.LastState, "OOMKilled") || len(p.NetStatus) != 1 || !reflect.DeepEqual(p.Networks, []string{"sriov-rdma"}) {
		t.Errorf("%+v\n%+v\nvolumes %+v", p, c, p.Volumes)
	}
	want := []string{"container-failed", "container-failed", "dangerous-env", "network-missing", "shm-no-limit"}
	if !reflect.DeepEqual(codes, want) {
		t.Errorf("findings %v, want %v", codes, want)
	}
}

// FuzzRead: any input is read without a panic.
func FuzzRead(f *testing.F) {
	f.Add(podJSON)
	f.Add(describe)
	f.Add("  - name: X\n    value: 1\nk8s.v1.cni.cncf.io/network-status: [{\n")
	f.Add(`{"kind":"Pod","status":{"containerStatuses":[{"name":"a","state":{"":{}}}]}}`)
	f.Add("mountPath: /dev/shm\nname: x\nmedium: Memory\nsizeLimit: 1Gi\npath: /dev/infiniband\n")
	f.Fuzz(func(t *testing.T, s string) {
		pods, err := Read(strings.NewReader(s), "fuzz")
		if err != nil {
			return
		}
		for _, p := range pods {
			Check(p)
		}
	})
}
