package ras

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Client is a connection to a RAS port: goccl's (rank 0 of a job with
// GOCCL_RAS_ADDR) or NCCL's (NCCL_RAS_ADDR). It follows NCCL's ncclras
// client: handshake, then optional TIMEOUT and SET FORMAT, then one
// STATUS or MONITOR.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	// ServerProtocol is the version the server announced.
	ServerProtocol int
	timeout        time.Duration // the server-side timeout set, for read deadlines
}

// handshakeWait bounds the connection and each one-line reply.
const handshakeWait = 5 * time.Second

// Dial connects to addr and exchanges the protocol versions; a server of
// another version is accepted (NCCL's client warns and goes on), its
// version is in ServerProtocol.
func Dial(ctx context.Context, addr string) (*Client, error) {
	d := net.Dialer{Timeout: handshakeWait}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to the RAS service at %s: %w (is the job running with the RAS address set, and is this the right host and port?)", addr, err)
	}
	c := &Client{conn: conn, r: bufio.NewReader(conn), timeout: DefaultTimeout}
	reply, err := c.command("CLIENT PROTOCOL " + strconv.Itoa(ProtocolVersion))
	if err != nil {
		conn.Close()
		return nil, err
	}
	v, ok := strings.CutPrefix(strings.ToUpper(reply), "SERVER PROTOCOL ")
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("unexpected response from %s: %q", addr, reply)
	}
	c.ServerProtocol, _ = strconv.Atoi(strings.TrimSpace(v))
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// command sends one command line and reads the one-line reply.
func (c *Client) command(cmd string) (string, error) {
	c.conn.SetDeadline(time.Now().Add(handshakeWait))
	defer c.conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(c.conn, cmd+"\n"); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: no reply: %w", cmd, err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// ok sends cmd and expects "OK".
func (c *Client) ok(cmd string) error {
	reply, err := c.command(cmd)
	if err != nil {
		return err
	}
	if !strings.EqualFold(reply, "OK") {
		return fmt.Errorf("%s: %s", cmd, reply)
	}
	return nil
}

// SetTimeout sets how long the server waits for each rank (TIMEOUT; 0:
// NCCL's "no timeout", goccl's MaxTimeout).
func (c *Client) SetTimeout(d time.Duration) error {
	if err := c.ok("TIMEOUT " + strconv.Itoa(int(d/time.Second))); err != nil {
		return err
	}
	c.timeout = d
	if d == 0 {
		c.timeout = MaxTimeout
	}
	return nil
}

// SetFormat chooses "text" or "json" (SET FORMAT).
func (c *Client) SetFormat(f string) error { return c.ok("SET FORMAT " + f) }

// Status sends STATUS (VERBOSE STATUS) and copies the reply to w until the
// server closes the connection, waiting at most the server's timeout plus
// a margin (NCCL's client allows twice its leg timeout and a second).
func (c *Client) Status(w io.Writer, verbose bool) error {
	cmd := "STATUS\n"
	if verbose {
		cmd = "VERBOSE STATUS\n"
	}
	c.conn.SetDeadline(time.Now().Add(2*c.timeout + 10*time.Second))
	if _, err := io.WriteString(c.conn, cmd); err != nil {
		return err
	}
	if _, err := io.Copy(w, c.r); err != nil {
		return fmt.Errorf("reading the status: %w", err)
	}
	return nil
}

// Monitor sends MONITOR (with groups, e.g. "lifecycle,trace"; "" for the
// server's default) and copies events to w until ctx ends or the server
// closes the connection.
func (c *Client) Monitor(ctx context.Context, w io.Writer, groups string) error {
	cmd := strings.TrimSpace("MONITOR " + groups)
	if err := c.ok(cmd); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { c.conn.Close() })
	defer stop()
	_, err := io.Copy(w, c.r)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
