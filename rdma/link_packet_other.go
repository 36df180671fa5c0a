//go:build !linux

package rdma

import "errors"

// packetLink (RoCE v1 over AF_PACKET) exists on Linux only.
type packetLink struct {
	link
	ifMTU int
	gid   [16]byte
}

func openPacketLink(ifname string) (*packetLink, error) {
	return nil, errors.New("RoCE v1 (AF_PACKET) is available on Linux only")
}
