package cluster

import (
	"context"
	"encoding/json"
	"fmt"
)

// QdiscStats is one qdisc on a link and what it passed (tc -s qdisc).
type QdiscStats struct {
	Kind    string `json:"kind"`   // "tbf", "netem", "noqueue"
	Handle  string `json:"handle"` // "1:"
	Parent  string `json:"parent,omitempty"`
	Root    bool   `json:"root,omitempty"`
	Bytes   uint64 `json:"bytes"` // sent on
	Packets uint64 `json:"packets"`
	Drops   uint64 `json:"drops"`
	// Overlimits counts the times a packet had to wait for the rate.
	Overlimits uint64 `json:"overlimits"`
	Backlog    uint64 `json:"backlog"` // bytes queued now
	Qlen       uint64 `json:"qlen"`    // packets queued now
}

// HostStats is the traffic of one host's link.
type HostStats struct {
	Host Host `json:"host"`
	// Present is false when the host's namespace is gone; the rest is
	// then empty.
	Present bool `json:"present"`
	// Egress are the qdiscs of the host's veth (host to switch), root
	// first; Port those of its switch port (switch to host).
	Egress []QdiscStats `json:"egress"`
	Port   []QdiscStats `json:"port"`
	// TxBytes and RxBytes are the host veth's counters: all it sent and
	// received, ARP and IPv6 neighbour discovery included.
	TxBytes   uint64 `json:"tx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
	// Links are the same for each of the host's links, one per rail
	// (the fields above are rail 0's), with the loss's drops.
	Links []LinkStats `json:"links"`
}

// LinkStats is the traffic of one of a host's links.
type LinkStats struct {
	Link      Link         `json:"link"`
	Egress    []QdiscStats `json:"egress"` // the host's veth
	Port      []QdiscStats `json:"port"`   // its switch port
	TxBytes   uint64       `json:"tx_bytes"`
	TxPackets uint64       `json:"tx_packets"`
	RxBytes   uint64       `json:"rx_bytes"`
	RxPackets uint64       `json:"rx_packets"`
	// LossDrops counts the packets from the host on this link that the
	// cluster's loss dropped (the nftables rule's counter); ECNMarks the
	// packets to the host that the switch marked CE.
	LossDrops uint64 `json:"loss_drops"`
	ECNMarks  uint64 `json:"ecn_marks"`
}

// Sent is the bytes the root qdisc of the host's egress sent (0 if none).
func (s HostStats) Sent() uint64 {
	for _, q := range s.Egress {
		if q.Root {
			return q.Bytes
		}
	}
	return 0
}

// Stats reads the qdisc and link counters of every host's link.
func (c *Cluster) Stats(ctx context.Context) ([]HostStats, error) {
	if geteuid() != 0 {
		return nil, fmt.Errorf("cluster %s: %w", c.Name, ErrNotRoot)
	}
	r, err := newRunner(ctx)
	if err != nil {
		return nil, err
	}
	all, err := r.namespaces()
	if err != nil {
		return nil, err
	}
	exists := map[string]bool{}
	for _, ns := range all {
		exists[ns] = true
	}
	var counters map[string]uint64
	if (c.Config.Loss > 0 || c.Config.ECN > 0) && exists[c.Switch] {
		if counters, err = r.nftCounters(c.Switch); err != nil {
			return nil, err
		}
	}
	var stats []HostStats
	for _, h := range c.Hosts {
		s := HostStats{Host: h, Present: exists[h.Name]}
		if s.Present {
			for _, l := range h.Links {
				ls := LinkStats{Link: l, LossDrops: counters["loss "+l.Port], ECNMarks: counters["ecn "+l.Port]}
				if ls.Egress, err = r.qdiscs(h.Name, l.Iface); err != nil {
					return nil, err
				}
				if exists[c.Switch] {
					if ls.Port, err = r.qdiscs(c.Switch, l.Port); err != nil {
						return nil, err
					}
				}
				out, err := r.run("ip", "-n", h.Name, "-s", "-j", "link", "show", "dev", l.Iface)
				if err != nil {
					return nil, err
				}
				var links []struct {
					Stats64 struct {
						Rx, Tx struct{ Bytes, Packets uint64 }
					} `json:"stats64"`
				}
				if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
					return nil, fmt.Errorf("ip -n %s -s -j link show dev %s: unexpected output %q", h.Name, l.Iface, out)
				}
				st := links[0].Stats64
				ls.TxBytes, ls.TxPackets, ls.RxBytes, ls.RxPackets = st.Tx.Bytes, st.Tx.Packets, st.Rx.Bytes, st.Rx.Packets
				s.Links = append(s.Links, ls)
			}
			l0 := s.Links[0]
			s.Egress, s.Port, s.TxBytes, s.TxPackets, s.RxBytes, s.RxPackets = l0.Egress, l0.Port, l0.TxBytes, l0.TxPackets, l0.RxBytes, l0.RxPackets
		}
		stats = append(stats, s)
	}
	return stats, nil
}

// nftCounters reads the packet counters of the cluster's nftables rules in
// the switch namespace sw, by the rules' comments ("loss PORT", "ecn
// PORT").
func (r *runner) nftCounters(sw string) (map[string]uint64, error) {
	if r.nft == "" {
		return nil, ErrNoNft
	}
	out, err := r.run("nft", sw, "-j", "list", "table", "bridge", NftTable)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Comment string            `json:"comment"`
				Expr    []json.RawMessage `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("nft -j list table bridge %s: %v", NftTable, err)
	}
	counters := map[string]uint64{}
	for _, o := range doc.Nftables {
		if o.Rule == nil || o.Rule.Comment == "" {
			continue
		}
		for _, e := range o.Rule.Expr {
			var c struct {
				Counter *struct{ Packets uint64 } `json:"counter"`
			}
			if json.Unmarshal(e, &c) == nil && c.Counter != nil {
				counters[o.Rule.Comment] = c.Counter.Packets
			}
		}
	}
	return counters, nil
}

// qdiscs reads tc -s -j qdisc show for dev in namespace ns, root first.
func (r *runner) qdiscs(ns, dev string) ([]QdiscStats, error) {
	out, err := r.run("tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev)
	if err != nil {
		return nil, err
	}
	var qs []QdiscStats
	if err := json.Unmarshal(out, &qs); err != nil {
		return nil, fmt.Errorf("tc -n %s -s -j qdisc show dev %s: %v: %q", ns, dev, err, out)
	}
	for i, q := range qs {
		if q.Root && i > 0 {
			copy(qs[1:i+1], qs[:i])
			qs[0] = q
			break
		}
	}
	return qs, nil
}
