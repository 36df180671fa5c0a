package k8s

import (
	"encoding/json"
	"fmt"
	"strings"
)

// object is the part of a Kubernetes object (kubectl get -o json) the
// checks read: a Pod, a List of objects, or a workload whose pod template
// is spec.template.
type object struct {
	Kind     string            `json:"kind"`
	Items    []json.RawMessage `json:"items"`
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		podSpec
		Template *struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec podSpec `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Conditions []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
		ContainerStatuses []struct {
			Name         string        `json:"name"`
			RestartCount int           `json:"restartCount"`
			State        map[string]st `json:"state"`
			LastState    map[string]st `json:"lastState"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

type st struct {
	Reason   string `json:"reason"`
	ExitCode *int   `json:"exitCode"`
}

type podSpec struct {
	NodeName       string          `json:"nodeName"`
	HostNetwork    bool            `json:"hostNetwork"`
	Containers     []jsonContainer `json:"containers"`
	InitContainers []jsonContainer `json:"initContainers"`
	Volumes        []struct {
		Name     string `json:"name"`
		EmptyDir *struct {
			Medium    string `json:"medium"`
			SizeLimit any    `json:"sizeLimit"`
		} `json:"emptyDir"`
		HostPath *struct {
			Path string `json:"path"`
		} `json:"hostPath"`
	} `json:"volumes"`
}

type jsonContainer struct {
	Name      string `json:"name"`
	Resources struct {
		Limits   map[string]any `json:"limits"`
		Requests map[string]any `json:"requests"`
	} `json:"resources"`
	Env []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
	SecurityContext *struct {
		Privileged   *bool `json:"privileged"`
		Capabilities *struct {
			Add []string `json:"add"`
		} `json:"capabilities"`
	} `json:"securityContext"`
}

// readJSON reads kubectl's JSON: one object, or a List's items.
func readJSON(text, file string) ([]*Pod, error) {
	var o object
	if err := json.Unmarshal([]byte(text), &o); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if strings.HasSuffix(o.Kind, "List") || len(o.Items) > 0 {
		var pods []*Pod
		for _, raw := range o.Items {
			ps, err := readJSON(string(raw), file)
			if err != nil {
				return nil, err
			}
			pods = append(pods, ps...)
		}
		return pods, nil
	}
	p := newPod(file)
	p.Name, p.Namespace, p.Kind = o.Metadata.Name, o.Metadata.Namespace, o.Kind
	p.known["metadata"], p.known["annotations"], p.known["volumes"] = true, true, true
	spec, ann := o.Spec.podSpec, o.Metadata.Annotations
	if o.Spec.Template != nil {
		spec, ann = o.Spec.Template.Spec, o.Spec.Template.Metadata.Annotations
	}
	if v, ok := ann["k8s.v1.cni.cncf.io/networks"]; ok {
		p.Networks = parseNetworks(v)
	}
	if v, ok := ann["k8s.v1.cni.cncf.io/network-status"]; ok {
		p.NetStatus, p.known["network-status"] = parseStatus(v), true
	}
	p.Node, p.HostNet, p.Phase = spec.NodeName, spec.HostNetwork, o.Status.Phase
	for _, v := range spec.Volumes {
		vol := &Volume{Kind: "other"}
		switch {
		case v.EmptyDir != nil:
			vol.Kind, vol.Medium = "emptyDir", v.EmptyDir.Medium
			if v.EmptyDir.SizeLimit != nil {
				vol.SizeLimit = fmt.Sprint(v.EmptyDir.SizeLimit)
			}
		case v.HostPath != nil:
			vol.Kind, vol.Path = "hostPath", v.HostPath.Path
		}
		p.Volumes[v.Name] = vol
	}
	for _, jc := range append(spec.InitContainers, spec.Containers...) {
		c := p.container(jc.Name)
		for k, v := range jc.Resources.Limits {
			c.Limits[k] = fmt.Sprint(v)
		}
		for k, v := range jc.Resources.Requests {
			c.Requests[k] = fmt.Sprint(v)
		}
		for _, e := range jc.Env {
			c.Env[e.Name] = e.Value
		}
		c.MountsSeen = true
		for _, m := range jc.VolumeMounts {
			c.Mounts[m.MountPath] = m.Name
		}
		if sc := jc.SecurityContext; sc != nil {
			c.Security = true
			c.Privileged = sc.Privileged != nil && *sc.Privileged
			if sc.Capabilities != nil {
				for _, a := range sc.Capabilities.Add {
					c.IPCLock = c.IPCLock || a == "IPC_LOCK" || a == "CAP_IPC_LOCK"
				}
			}
		}
	}
	for _, cs := range o.Status.ContainerStatuses {
		c := p.container(cs.Name)
		c.Restarts = cs.RestartCount
		c.State, c.LastState = stateText(cs.State), stateText(cs.LastState)
	}
	for _, cond := range o.Status.Conditions {
		if cond.Status == "False" && cond.Message != "" {
			p.Events = append(p.Events, Event{Reason: cond.Reason, Message: cond.Message})
		}
	}
	return []*Pod{p}, nil
}

// stateText is "Waiting CrashLoopBackOff" from a container state.
func stateText(m map[string]st) string {
	for k, v := range m {
		if k == "" {
			continue
		}
		return strings.TrimSpace(strings.ToUpper(k[:1]) + k[1:] + " " + v.Reason)
	}
	return ""
}
