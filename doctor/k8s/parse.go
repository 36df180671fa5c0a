package k8s

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccl/goccl/doctor"
)

// Read reads one input: JSON (a Pod, a List of them, or any object whose
// pod template it finds) or text (YAML, describe output, pieces of
// either), and returns the pods it shows.
func Read(r io.Reader, file string) ([]*Pod, error) {
	var lines []string
	if _, err := doctor.ReadLines(r, doctor.TableMaxLine, doctor.TableMaxLines, func(_ int, l string) {
		lines = append(lines, doctor.CleanLine(l))
	}); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	text := strings.TrimSpace(strings.Join(lines, "\n"))
	if strings.HasPrefix(text, "{") {
		if pods, err := readJSON(text, file); err == nil {
			return pods, nil
		}
	}
	s := &scanner{file: file, pod: newPod(file)}
	for _, l := range lines {
		s.line(l)
	}
	s.flush()
	return s.pods, nil
}

// scanner reads YAML and describe text line by line, by the keys on the
// path to each line (indentation), so that pieces of either are read as
// far as they go.
type scanner struct {
	file  string
	pods  []*Pod
	pod   *Pod
	stack []frame
	cur   *Container // the container the lines are in
	vol   *Volume    // the volume the lines are in
	item  map[string]string
	// Multi-line JSON of network-status being collected, and its depth.
	collect *strings.Builder
	depth   int
}

type frame struct {
	indent int
	key    string // lower case
	item   bool   // a list item ("- ")
}

var (
	keyRe      = regexp.MustCompile(`^([^:\s][^:]*?):(?:\s+(.*))?$`)
	promptRe   = regexp.MustCompile(`[$#]\s*kubectl\s`)
	insuffRe   = regexp.MustCompile(`Insufficient ([A-Za-z0-9./_-]+)`)
	describeRe = regexp.MustCompile(`^(Name|Namespace|Node|Status|Annotations|Containers|Volumes|Events|Conditions|Labels|IP|Priority):`)
	mountRe    = regexp.MustCompile(`^(/\S*) from (\S+)`)
	fieldsRe   = regexp.MustCompile(`\s{2,}|\t+`)
	envNameRe  = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
)

func (s *scanner) flush() {
	if !s.pod.empty() {
		s.pods = append(s.pods, s.pod)
	}
	s.pod, s.stack, s.cur, s.vol, s.item = newPod(s.file), nil, nil, nil, nil
}

func (s *scanner) line(raw string) {
	if s.collect != nil {
		s.collectJSON(raw)
		return
	}
	trimmed := strings.TrimSpace(raw)
	if trimmed == "" || strings.HasPrefix(trimmed, "#") {
		return
	}
	if trimmed == "---" || promptRe.MatchString(raw) {
		if promptRe.MatchString(raw) && strings.Contains(raw, "describe") || trimmed == "---" {
			s.flush()
		}
		s.stack = nil
		return
	}
	s.event(trimmed)
	if describeRe.MatchString(raw) && strings.HasPrefix(raw, "Name:") && s.pod.Name != "" {
		s.flush()
	}
	indent := len(raw) - len(strings.TrimLeft(raw, " \t"))
	body := stripComment(trimmed)
	item := false
	if strings.HasPrefix(body, "- ") || body == "-" {
		item = true
		// A list may sit at its key's own indentation ("containers:" then
		// "- name:" under it): pop deeper frames and earlier items only.
		for n := len(s.stack); n > 0 && (s.stack[n-1].indent > indent || s.stack[n-1].indent == indent && s.stack[n-1].item); n = len(s.stack) {
			s.stack = s.stack[:n-1]
		}
		s.stack = append(s.stack, frame{indent: indent, item: true})
		s.item = map[string]string{}
		body = strings.TrimSpace(strings.TrimPrefix(body, "-"))
		indent += 2
		if body == "" {
			return
		}
	}
	for len(s.stack) > 0 && s.stack[len(s.stack)-1].indent >= indent {
		s.stack = s.stack[:len(s.stack)-1]
	}
	key, val, isKey := "", body, false
	if m := keyRe.FindStringSubmatch(body); m != nil && !strings.HasPrefix(body, "/") {
		key, val, isKey = strings.ToLower(strings.TrimSpace(m[1])), unquote(strings.TrimSpace(m[2])), true
	}
	s.apply(raw, indent, key, val, isKey, item)
	if isKey {
		s.stack = append(s.stack, frame{indent: indent, key: key})
	}
}

// path returns the keys above the current line, innermost last.
func (s *scanner) parent(up int) string {
	n := 0
	for i := len(s.stack) - 1; i >= 0; i-- {
		if s.stack[i].item {
			continue
		}
		if n == up {
			return s.stack[i].key
		}
		n++
	}
	return ""
}

func (s *scanner) under(key string) bool {
	for _, f := range s.stack {
		if f.key == key {
			return true
		}
	}
	return false
}

// apply reads one line of key: val (or a plain value) at indent.
func (s *scanner) apply(raw string, indent int, key, val string, isKey, item bool) {
	p := s.pod
	parent := s.parent(0)
	top := indent == 0 && !item
	switch {
	case key == "k8s.v1.cni.cncf.io/networks":
		p.known["annotations"] = true
		p.Networks = parseNetworks(val)
		return
	case key == "k8s.v1.cni.cncf.io/network-status":
		p.known["annotations"] = true
		if val == "" || val == "|" || val == "|-" || strings.HasPrefix(val, "[") {
			s.collect, s.depth = &strings.Builder{}, 0
			if strings.HasPrefix(val, "[") {
				s.collectJSON(val)
			}
		}
		return
	case top && describeRe.MatchString(raw):
		s.describeTop(key, val)
		return
	}
	if parent == "containers" && indent == 2 && isKey && val == "" && !item { // describe: "  name:"
		s.cur = p.container(strings.TrimSuffix(key, ":"))
		s.cur.Name = strings.TrimSpace(strings.Split(strings.TrimSpace(raw), ":")[0])
		return
	}
	if parent == "volumes" && indent == 2 && isKey && val == "" && !item { // describe: "  name:"
		name := strings.TrimSpace(strings.Split(strings.TrimSpace(raw), ":")[0])
		s.vol = &Volume{Kind: "other"}
		p.Volumes[name] = s.vol
		p.known["volumes"] = true
		return
	}
	switch parent {
	case "limits", "requests":
		if isKey && val != "" {
			c := s.container()
			if parent == "limits" {
				c.Limits[rawKey(raw)] = val
			} else {
				c.Requests[rawKey(raw)] = val
			}
		}
		return
	case "environment": // describe
		if isKey && val != "" && !strings.HasPrefix(val, "<") {
			s.container().Env[rawKey(raw)] = val
		}
		return
	case "mounts": // describe
		if m := mountRe.FindStringSubmatch(strings.TrimSpace(raw)); m != nil {
			c := s.container()
			c.Mounts[m[1]] = m[2]
			c.MountsSeen = true
		}
		return
	case "metadata":
		if key == "name" && p.Name == "" {
			p.Name = val
		}
		if key == "namespace" {
			p.Namespace = val
		}
		if key == "annotations" {
			p.known["annotations"] = true
		}
		p.known["metadata"] = true
	}
	if s.under("capabilities") && strings.Contains(raw, "IPC_LOCK") {
		s.container().IPCLock = true
	}
	if item && parent == "containers" || item && parent == "initcontainers" {
		s.cur = nil // a new container: named by its name key
	}
	switch key {
	case "kind":
		if p.Kind == "" && indent == 0 {
			p.Kind = val
		}
	case "name":
		switch {
		case s.inItemOf("containers", "initcontainers"):
			c := p.container(val)
			if s.cur != nil && s.cur.Name == "" && s.cur != c { // fields seen before the name
				mergeInto(c, s.cur)
			}
			s.cur = c
		case s.inItemOf("volumemounts"):
			s.item["name"] = val
			s.mount()
		case s.inItemOf("volumes"):
			s.vol = &Volume{Kind: "other"}
			p.Volumes[val] = s.vol
			p.known["volumes"] = true
		case s.inItemOf("env") || envNameRe.MatchString(val) && s.item != nil:
			s.item["env"] = val // a fragment may start inside the env list
		}
	case "value":
		if s.item != nil && s.item["env"] != "" && (s.inItemOf("env") || envNameRe.MatchString(s.item["env"])) {
			s.container().Env[s.item["env"]] = val
		}
	case "mountpath":
		s.container().MountsSeen = true
		if s.item != nil {
			s.item["path"] = val
			s.mount()
		}
	case "volumemounts":
		s.container().MountsSeen = true
	case "emptydir":
		s.volume().Kind = "emptyDir"
	case "hostpath":
		s.volume().Kind = "hostPath"
	case "medium":
		s.volume().Medium = val
	case "sizelimit":
		if val != "<unset>" {
			s.volume().SizeLimit = val
		}
	case "path":
		if s.vol != nil && (parent == "hostpath" || s.vol.Kind == "hostPath") {
			s.vol.Path = val
		}
	case "type": // describe volumes: "Type: EmptyDir (a temporary ...)"
		if s.under("volumes") && s.vol != nil {
			switch {
			case strings.HasPrefix(val, "EmptyDir"):
				s.vol.Kind = "emptyDir"
			case strings.HasPrefix(val, "HostPath"):
				s.vol.Kind = "hostPath"
			}
		}
	case "securitycontext":
		s.container().Security = true
	case "privileged":
		s.container().Privileged = val == "true"
		s.container().Security = true
	case "add":
		if strings.Contains(val, "IPC_LOCK") {
			s.container().IPCLock = true
		}
	case "hostnetwork":
		p.HostNet = val == "true"
	case "nodename", "node":
		if val != "<none>" {
			p.Node = val
		}
	case "phase":
		p.Phase = val
	case "message":
		if insuffRe.MatchString(val) {
			p.Events = append(p.Events, Event{Reason: "Unschedulable", Message: val})
		}
	case "state", "last state":
		if s.cur != nil && val != "" && !s.under("volumes") {
			if key == "state" {
				s.cur.State = val
			} else {
				s.cur.LastState = val
			}
		}
	case "reason":
		if s.cur != nil && val != "" && (s.parent(1) == "state" || s.parent(0) == "state" || s.parent(0) == "last state") {
			if s.parent(0) == "last state" {
				s.cur.LastState += " " + val
			} else {
				s.cur.State += " " + val
			}
		}
	case "restart count":
		if s.cur != nil {
			s.cur.Restarts, _ = strconv.Atoi(val)
		}
	}
}

// describeTop reads a top-level line of describe output.
func (s *scanner) describeTop(key, val string) {
	p := s.pod
	switch key {
	case "name":
		p.Name = val
		p.known["metadata"] = true
	case "namespace":
		p.Namespace = val
	case "node":
		if val != "<none>" {
			p.Node = val
		}
	case "status":
		p.Phase = val
	case "annotations":
		p.known["annotations"] = true
		if k, v, ok := strings.Cut(val, ":"); ok {
			s.apply(strings.Repeat(" ", 14)+val, 14, strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v), true, false)
		}
	case "volumes":
		p.known["volumes"] = true
	}
	s.cur, s.vol = nil, nil
}

// inItemOf says the line is in a list item of one of the keys.
func (s *scanner) inItemOf(keys ...string) bool {
	for i := len(s.stack) - 1; i >= 1; i-- {
		if s.stack[i].item {
			for _, k := range keys {
				if s.stack[i-1].key == k {
					return true
				}
			}
			return false
		}
	}
	return false
}

// container is the container the current lines belong to ("" in a
// fragment that shows none).
func (s *scanner) container() *Container {
	if s.cur == nil {
		s.cur = s.pod.container("")
	}
	return s.cur
}

func (s *scanner) volume() *Volume {
	if s.vol == nil {
		s.vol = &Volume{Kind: "other"}
		s.pod.Volumes[""] = s.vol
	}
	return s.vol
}

func (s *scanner) mount() {
	if s.item["path"] != "" && s.item["name"] != "" {
		s.container().Mounts[s.item["path"]] = s.item["name"]
	}
}

// mergeInto moves what an unnamed container collected into c.
func mergeInto(c, from *Container) {
	for k, v := range from.Limits {
		c.Limits[k] = v
	}
	for k, v := range from.Requests {
		c.Requests[k] = v
	}
	for k, v := range from.Env {
		c.Env[k] = v
	}
	for k, v := range from.Mounts {
		c.Mounts[k] = v
	}
	c.IPCLock = c.IPCLock || from.IPCLock
	c.Privileged = c.Privileged || from.Privileged
	c.Security = c.Security || from.Security
}

// event records a warning event line: describe's Events table ("Warning
// REASON AGE FROM MESSAGE") or kubectl get events' ("AGE Warning REASON
// KIND MESSAGE").
func (s *scanner) event(line string) {
	f := fieldsRe.Split(line, -1)
	for i, x := range f {
		if x == "Warning" && i+1 < len(f) && len(f) >= i+3 {
			s.pod.Events = append(s.pod.Events, Event{Reason: f[i+1], Message: f[len(f)-1]})
			return
		}
	}
}

// collectJSON adds a line of network-status' JSON and parses it once its
// brackets close.
func (s *scanner) collectJSON(line string) {
	s.collect.WriteString(line)
	s.collect.WriteByte('\n')
	inStr, esc := false, false
	for _, c := range line {
		switch {
		case esc:
			esc = false
		case c == '\\' && inStr:
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '[' || c == '{':
			s.depth++
		case c == ']' || c == '}':
			s.depth--
		}
	}
	if s.depth <= 0 && strings.Contains(s.collect.String(), "[") {
		s.pod.NetStatus = parseStatus(s.collect.String())
		s.pod.known["network-status"] = true
		s.collect = nil
	}
}

// rawKey is a resource or variable name as written (keys are compared in
// lower case, but names keep their case).
func rawKey(raw string) string {
	k, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(raw), "- ")), ":")
	return strings.Trim(strings.TrimSpace(k), `"'`)
}

// stripComment cuts a YAML comment ( #...) outside quotes.
func stripComment(s string) string {
	inQ := byte(0)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQ != 0:
			if c == inQ {
				inQ = 0
			}
		case c == '"' || c == '\'':
			inQ = c
		case c == '#' && i > 0 && (s[i-1] == ' ' || s[i-1] == '\t'):
			return strings.TrimSpace(s[:i])
		}
	}
	return s
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}

// parseNetworks reads the networks annotation: "a,b", "ns/a@net1" or a
// JSON list of {"name": ...}.
func parseNetworks(v string) []string {
	v = strings.TrimSpace(v)
	var out []string
	if strings.HasPrefix(v, "[") {
		var sel []struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		}
		if json.Unmarshal([]byte(v), &sel) == nil {
			for _, x := range sel {
				out = append(out, x.Name)
			}
		}
		return out
	}
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			n, _, _ = strings.Cut(n, "@")
			out = append(out, n)
		}
	}
	return out
}

// parseStatus reads network-status' JSON.
func parseStatus(text string) []Attachment {
	var raw []struct {
		Name       string   `json:"name"`
		Interface  string   `json:"interface"`
		IPs        []string `json:"ips"`
		Default    bool     `json:"default"`
		DeviceInfo struct {
			PCI struct {
				Address string `json:"pci-address"`
				RDMA    string `json:"rdma-device"`
			} `json:"pci"`
		} `json:"device-info"`
	}
	text = strings.TrimSpace(text)
	if strings.HasPrefix(text, "|") {
		text = text[strings.IndexByte(text, '\n')+1:]
	}
	if json.Unmarshal([]byte(text), &raw) != nil {
		return nil
	}
	out := make([]Attachment, len(raw))
	for i, a := range raw {
		out[i] = Attachment{Name: a.Name, Interface: a.Interface, IPs: a.IPs, Default: a.Default, PCI: a.DeviceInfo.PCI.Address, RDMA: a.DeviceInfo.PCI.RDMA}
	}
	return out
}
