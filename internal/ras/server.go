package ras

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Source is what the server reports on: Status probes the job, waiting at
// most timeout for each rank.
type Source interface {
	Status(ctx context.Context, timeout time.Duration) *Job
}

// Event groups of MONITOR (NCCL's RAS_EVENT_*): lifecycle (a rank died, a
// communicator failed) and trace (a rank stopped answering, or answers
// again).
const (
	GroupLifecycle = 1 << iota
	GroupTrace
	GroupAll = GroupLifecycle | GroupTrace
)

// Server serves RAS clients on a listener.
type Server struct {
	ln      net.Listener
	src     Source
	version string // the first line of a text STATUS
	// MonitorEvery is how often a MONITOR connection probes the job (and
	// the wait for each rank's answer then).
	MonitorEvery time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// maxLine bounds a command line (NCCL's client buffer is 1 KiB);
// idleLimit is how long a connection may stay silent before a command.
const (
	maxLine   = 1024
	idleLimit = 5 * time.Minute
)

// Serve starts serving src on ln, in the background, until Close; version
// names the library in replies ("goccl v1.2.3").
func Serve(ln net.Listener, src Source, version string) *Server {
	s := &Server{ln: ln, src: src, version: version, MonitorEvery: time.Second, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server and ends every connection, monitors included,
// and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: try again
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.session(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// session is one client's connection: commands until STATUS (answered,
// then the connection closes, as NCCL's), MONITOR (events until either
// side closes) or the end of input.
func (s *Server) session(c net.Conn) {
	st := sessionState{timeout: DefaultTimeout}
	r := bufio.NewReaderSize(c, maxLine)
	for {
		c.SetReadDeadline(time.Now().Add(idleLimit))
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				return // NCCL drops such clients too
			}
			return
		}
		reply, next := st.command(line)
		if reply != "" {
			if _, err := io.WriteString(c, reply); err != nil {
				return
			}
		}
		switch next {
		case doStatus:
			s.status(c, &st)
			return
		case doMonitor:
			s.monitor(c, r, &st)
			return
		}
	}
}

var errLineTooLong = errors.New("ras: command line too long")

// readLine reads one command line without its "\n" or "\r\n".
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return "", errLineTooLong
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r"), nil
}

// sessionState is what a client set on its connection.
type sessionState struct {
	timeout time.Duration
	json    bool
	verbose bool
	groups  int
}

type next int

const (
	doNothing next = iota
	doStatus
	doMonitor
)

// command applies one command line and returns the reply to send at once
// (possibly none) and what to do next. Commands are case-insensitive, as
// NCCL's.
func (st *sessionState) command(line string) (string, next) {
	lower := strings.ToLower(line)
	arg := func(prefix string) string { return line[len(prefix):] }
	switch {
	case strings.HasPrefix(lower, "client protocol "):
		// Like NCCL, any client version is served; the client decides.
		return "SERVER PROTOCOL " + strconv.Itoa(ProtocolVersion) + "\n", doNothing
	case strings.HasPrefix(lower, "timeout "):
		n, err := strconv.Atoi(arg("timeout "))
		if err != nil || n < 0 {
			return "ERROR: Invalid timeout value " + arg("timeout ") + "\n", doNothing
		}
		st.timeout = time.Duration(n) * time.Second
		if n == 0 || st.timeout > MaxTimeout {
			st.timeout = MaxTimeout
		}
		return "OK\n", doNothing
	case strings.HasPrefix(lower, "set format "):
		switch f := strings.ToLower(arg("set format ")); f {
		case "text", "json":
			st.json = f == "json"
			return "OK\n", doNothing
		}
		return "ERROR: Invalid format " + arg("set format ") + "\n", doNothing
	case lower == "status":
		return "", doStatus
	case lower == "verbose status":
		st.verbose = true
		return "", doStatus
	case lower == "monitor" || strings.HasPrefix(lower, "monitor "):
		g, bad := parseGroups(strings.TrimSpace(line[len("monitor"):]))
		if bad != "" {
			return "ERROR: Invalid event group '" + bad + "'\n", doNothing
		}
		st.groups = g
		return "OK\n", doMonitor
	}
	return "ERROR: Unknown command " + line + "\n", doNothing
}

// parseGroups parses MONITOR's optional groups ("lifecycle,trace", "all");
// none is lifecycle. It returns the first bad word, if any.
func parseGroups(spec string) (int, string) {
	if spec == "" {
		return GroupLifecycle, ""
	}
	g := 0
	for _, w := range strings.Split(spec, ",") {
		switch strings.ToLower(w) {
		case "lifecycle":
			g |= GroupLifecycle
		case "trace":
			g |= GroupTrace
		case "all":
			g |= GroupAll
		default:
			return 0, w
		}
	}
	return g, ""
}

// status answers STATUS: in text, the version line is sent before the
// probes, then the rest once they are done (as NCCL sends "Communicators..."
// before gathering).
func (s *Server) status(c net.Conn, st *sessionState) {
	ctx, cancel := s.context()
	defer cancel()
	c.SetWriteDeadline(time.Now().Add(st.timeout + 30*time.Second))
	if !st.json {
		io.WriteString(c, versionLine(s.version))
	}
	job := s.src.Status(ctx, st.timeout)
	job.Verbose = st.verbose
	if st.json {
		b, err := job.JSON()
		if err != nil {
			fmt.Fprintf(c, "ERROR: %v\n", err)
			return
		}
		c.Write(b)
		return
	}
	io.WriteString(c, job.Text())
}

// context is a context that ends when the server closes.
func (s *Server) context() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// monitor streams events to c until the client closes its side, a write
// fails or the server closes: every MonitorEvery the job is probed and
// the changes since the previous probe are events.
func (s *Server) monitor(c net.Conn, r *bufio.Reader, st *sessionState) {
	ctx, cancel := s.context()
	defer cancel()
	go func() {
		// Anything the client sends now is ignored; its end stops us.
		c.SetReadDeadline(time.Time{})
		io.Copy(io.Discard, r)
		cancel()
	}()
	every := s.MonitorEvery
	prev := s.src.Status(ctx, every)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := s.src.Status(ctx, every)
		if ctx.Err() != nil {
			return
		}
		for _, e := range Diff(prev, cur) {
			if e.Group&st.groups == 0 {
				continue
			}
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, e.Format(st.json)); err != nil {
				return
			}
		}
		prev = cur
	}
}
