package collnet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport/roce"
)

// Client is a rank's attachment to an aggregation tree for one job.
type Client struct {
	conn net.Conn
	node string // the node this rank is attached to (the root, or the leaf it was sent to)
	root string
	roce bool
}

// RoCE reports whether the data path to the node runs over RoCE.
func (c *Client) RoCE() bool { return c.roce }

// Attach attaches rank (of size) of job to the tree whose root is at root:
// the root takes the rank or sends it to a leaf. With dom (not nil) the
// data path goes over RoCE queue pairs of dom's device when the node has a
// device too (Client.RoCE), else over the TCP connection.
func Attach(ctx context.Context, root string, job JobID, rank, size int, dom *roce.Domain) (*Client, error) {
	h := hello{kind: kindAttach, job: job, rank: int32(rank), size: uint32(size)}
	if dom != nil {
		h.flags = flagRoCE
	}
	addr := root
	for hop := 0; hop < 2; hop++ {
		c, r, err := attachOnce(ctx, addr, &h)
		if err != nil {
			return nil, fmt.Errorf("%w: aggregation node %s: attaching rank %d: %v", ErrAggregation, addr, rank, err)
		}
		switch r.status {
		case replyOK:
			if r.flags&flagRoCE == 0 {
				return &Client{conn: c, node: addr, root: root}, nil
			}
			s, _, err := roce.Upgrade(ctx, c, 0, dom, roce.Options{})
			if err != nil {
				return nil, fmt.Errorf("%w: aggregation node %s: attaching rank %d over RoCE: %v", ErrAggregation, addr, rank, err)
			}
			return &Client{conn: s, node: addr, root: root, roce: true}, nil
		case replyRedirect:
			c.Close()
			if hop > 0 {
				return nil, fmt.Errorf("%w: aggregation node %s redirected rank %d again", ErrAggregation, addr, rank)
			}
			addr = r.addr
			h.index, h.group, h.upIndex, h.upGroup = r.index, r.group, r.upIndex, r.upGroup
		default:
			c.Close()
			return nil, fmt.Errorf("%w: aggregation node %s refused rank %d: %s", ErrAggregation, addr, rank, r.addr)
		}
	}
	return nil, fmt.Errorf("%w: no aggregation node took rank %d", ErrAggregation, rank)
}

func attachOnce(ctx context.Context, addr string, h *hello) (net.Conn, hello, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, hello{}, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if err := writeHello(c, h); err != nil {
		c.Close()
		return nil, hello{}, err
	}
	r, err := readHello(c)
	if err != nil {
		c.Close()
		return nil, hello{}, err
	}
	c.SetDeadline(time.Time{})
	return c, r, nil
}

// Node is the address of the node this rank is attached to.
func (c *Client) Node() string { return c.node }

// Close detaches (the node sees the stream end between operations).
func (c *Client) Close() error { return c.conn.Close() }

// AllReduce sends send (n bytes of elements of size elem, type dtype) up
// the tree and receives the reduction with operator op into recv (len n;
// it may be send itself): operation seq of the job, the same at every
// rank. On failure the error wraps ErrAggregation and names the node, and
// the attachment is unusable.
func (c *Client) AllReduce(ctx context.Context, seq uint64, send, recv []byte, dtype, op uint8, elem int) error {
	n := len(recv)
	if dl, ok := ctx.Deadline(); ok {
		c.conn.SetDeadline(dl)
	} else {
		c.conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Now()) })
	defer stop()
	var hb [opSize]byte
	h := opHeader{seq: seq, bytes: uint64(n), dtype: dtype, op: op, elem: uint8(elem)}
	h.encode(hb[:])
	if _, err := c.conn.Write(hb[:]); err != nil {
		return c.err(ctx, "sending", err)
	}
	// The payload goes in chunks from another goroutine; sent orders this
	// goroutine's writes of the result (which may land in send) after the
	// sends of the same bytes (the result of a chunk cannot arrive before
	// this rank's copy of it left).
	var sent atomic.Int64
	werr := make(chan error, 1)
	go func() {
		for off := 0; off < n; off += ChunkBytes {
			end := min(n, off+ChunkBytes)
			if _, err := c.conn.Write(send[off:end]); err != nil {
				werr <- err
				sent.Store(int64(n)) // no reader waits for bytes that will not leave
				return
			}
			sent.Store(int64(end))
		}
		werr <- nil
	}()
	rerr := c.receive(recv, &sent)
	if err := <-werr; rerr == nil && err != nil {
		rerr = c.err(ctx, "sending", err)
	} else if rerr != nil {
		rerr = c.err(ctx, "receiving", rerr)
	}
	return rerr
}

// remoteError is an error frame: the tree's own account of the failure.
type remoteError struct{ msg string }

func (e *remoteError) Error() string { return e.msg }

// receive reads the result frames into recv.
func (c *Client) receive(recv []byte, sent *atomic.Int64) error {
	var fh [frameSize]byte
	for got := 0; got < len(recv); {
		if _, err := io.ReadFull(c.conn, fh[:]); err != nil {
			return err
		}
		kind, m := binary.LittleEndian.Uint32(fh[:]), int(binary.LittleEndian.Uint32(fh[4:]))
		if kind == frameError {
			msg := make([]byte, min(m, 4096))
			io.ReadFull(c.conn, msg)
			return &remoteError{string(msg)}
		}
		if kind != frameData || m > len(recv)-got {
			return fmt.Errorf("bad frame (kind %d, %d bytes) at byte %d of %d", kind, m, got, len(recv))
		}
		for sent.Load() < int64(got+m) {
			runtime.Gosched()
		}
		if _, err := io.ReadFull(c.conn, recv[got:got+m]); err != nil {
			return err
		}
		got += m
	}
	return nil
}

// err names the node and, for the tree's own report, gives its words.
func (c *Client) err(ctx context.Context, what string, err error) error {
	c.conn.Close()
	var re *remoteError
	if errors.As(err, &re) {
		return fmt.Errorf("%w: %s", ErrAggregation, re.msg)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: aggregation node %s: %s: %w", ErrAggregation, c.node, what, ctx.Err())
	}
	return fmt.Errorf("%w: aggregation node %s: %s: %v (the node or the tree above it is gone)", ErrAggregation, c.node, what, err)
}
