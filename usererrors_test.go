package goccl_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/config"
	"github.com/goccl/goccl/rendezvous"
)

// TestErrorUnknownRank: an error whose rank is not known (Init refusing its
// environment, before it has a rank) names none, rather than "rank -1".
func TestErrorUnknownRank(t *testing.T) {
	e := &goccl.Error{Rank: -1, Op: "Init", Err: errors.New("bad")}
	if got := e.Error(); got != "goccl: Init: bad" {
		t.Errorf("Error() = %q", got)
	}
	t.Setenv(config.Rank.Name, "1")
	t.Setenv(config.WorldSize.Name, "2")
	t.Setenv(config.Store.Name, "bogus://nowhere")
	c, err := goccl.Init(context.Background())
	if err == nil {
		c.Close()
		t.Fatal("Init with a bad GOCCL_STORE succeeded")
	}
	if msg := err.Error(); strings.Contains(msg, "rank -1") || !strings.Contains(msg, config.Store.Name) {
		t.Errorf("Init: %q: want the variable named and no rank -1", msg)
	}
	// Given a rank, Init's error names it.
	if _, err := goccl.Init(context.Background(), goccl.WithRank(1), goccl.WithWorldSize(2)); err == nil || !strings.HasPrefix(err.Error(), "goccl: rank 1: Init: ") {
		t.Errorf("Init with rank 1: %v", err)
	}
}

// wantOp checks that err is an *Error of op whose message holds each of
// parts, and that it does not call itself a SendRecv unless op is one.
func wantOp(t *testing.T, what string, err error, op string, parts ...string) {
	t.Helper()
	var e *goccl.Error
	if !errors.As(err, &e) || e.Op != op {
		t.Errorf("%s: %v, want an error of %s", what, err, op)
		return
	}
	msg := err.Error()
	if op != "SendRecv" && strings.Contains(msg, "SendRecv") && !strings.Contains(msg, "use SendRecv") {
		t.Errorf("%s: %q calls itself a SendRecv", what, msg)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("%s: %q lacks %q", what, msg, p)
		}
	}
}

// TestSendRecvErrorNames: a Send's and a Recv's errors (their arguments,
// blocking, non-blocking and in a Group, and those of a running one) name
// the Send or the Recv; a SendRecv's name the SendRecv.
func TestSendRecvErrorNames(t *testing.T) {
	ctx := context.Background()
	comms := initComms(t, 2, rendezvous.NewMemStore(), 300*time.Millisecond)
	c := comms[0]
	buf := make([]float32, 4)
	wantOp(t, "Send to self", goccl.Send(ctx, c, buf, 4, 0), "Send", "Send to self")
	wantOp(t, "Recv from self", goccl.Recv(ctx, c, buf, 4, 0), "Recv", "Recv from self")
	wantOp(t, "Send to 5", goccl.Send(ctx, c, buf, 4, 5), "Send", "peer 5 is outside [0, 2)", "rank 0")
	wantOp(t, "Recv from -1", goccl.Recv(ctx, c, buf, 4, -1), "Recv", "peer -1 is outside [0, 2)")
	wantOp(t, "Send of -1", goccl.Send(ctx, c, buf, -1, 1), "Send", "negative count -1")
	wantOp(t, "Recv of 8 into 4", goccl.Recv(ctx, c, buf, 8, 1), "Recv", "recvbuf holds 4 elements")
	_, err := goccl.ISend(ctx, c, buf, -1, 1)
	wantOp(t, "ISend of -1", err, "Send", "negative count")
	_, err = goccl.IRecv(ctx, c, buf, 4, 2)
	wantOp(t, "IRecv from 2", err, "Recv", "peer 2 is outside")
	err = c.Group(ctx, func(g *goccl.Group) error { return goccl.GroupSend(g, buf, 4, 9) })
	wantOp(t, "Group Send to 9", err, "Send", "peer 9 is outside")
	err = c.Group(ctx, func(g *goccl.Group) error { return goccl.GroupRecv(g, buf, 8, 1) })
	wantOp(t, "Group Recv of 8 into 4", err, "Recv", "recvbuf holds 4 elements")
	wantOp(t, "SendRecv to 7", goccl.SendRecv(ctx, c, buf, 7, buf, 1, 4), "SendRecv", "peer 7 is outside")

	// A running Recv that nothing matches: its timeout's error, and the
	// next call's, which names it as the earlier error.
	err = goccl.Recv(ctx, c, buf, 4, 1)
	wantOp(t, "unmatched Recv", err, "Recv", "did not finish within 300ms (WithTimeout(300ms); WithTimeout or GOCCL_TIMEOUT raises it)")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unmatched Recv: %v, want a deadline error", err)
	}
	wantOp(t, "Send after it", goccl.Send(ctx, c, buf, 4, 1), "Send", "unusable after an earlier error: goccl: rank 0: Recv")

	// A non-blocking Recv that nothing matches: its Request's error.
	comms = initComms(t, 2, rendezvous.NewMemStore(), 300*time.Millisecond)
	r, err := goccl.IRecv(ctx, comms[1], buf, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = r.Wait(ctx)
	wantOp(t, "unmatched IRecv", err, "Recv", "rank 1", "did not finish within 300ms")
}

// TestTimeoutNamesSetting: an operation that the communicator's timeout
// ends says how long it was and that GOCCL_TIMEOUT set it.
func TestTimeoutNamesSetting(t *testing.T) {
	t.Setenv(config.Timeout.Name, "300ms")
	comms := initComms(t, 2, rendezvous.NewMemStore(), 0)
	// The message says what Init saw, whatever the environment says later.
	t.Setenv(config.Timeout.Name, "")
	buf := make([]float32, 1<<16)
	err := goccl.AllReduce(context.Background(), comms[0], buf, buf, len(buf), goccl.Sum) // rank 1 never joins
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AllReduce without its peer: %v, want a deadline error", err)
	}
	wantOp(t, "AllReduce", err, "AllReduce", "rank 0", "did not finish within 300ms (GOCCL_TIMEOUT=300ms; WithTimeout or GOCCL_TIMEOUT raises it)",
		"no message of this operation yet from rank(s) 1")
	// A deadline of the caller's own is the caller's: nothing added.
	comms = initComms(t, 2, rendezvous.NewMemStore(), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = goccl.AllReduce(ctx, comms[0], buf, buf, len(buf), goccl.Sum)
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "GOCCL_TIMEOUT") {
		t.Errorf("AllReduce past its context's deadline: %v", err)
	}
}

// nilGetters is what the methods of a nil *Comm that return no error give
// (see Comm.Rank); a method missing here and from the error-returning
// ones fails TestNilComm until its nil behaviour is decided.
var nilGetters = map[string][]any{
	"Rank":       {-1},
	"LocalRank":  {-1},
	"Size":       {0},
	"PeerBytes":  {uint64(0), uint64(0)},
	"Abort":      {},
	"TraceSpan":  {},
	"Stragglers": {goccl.Stragglers{}},
}

// TestNilComm: every exported method of *Comm called on a nil one returns
// an error wrapping ErrInvalidArgument (naming no rank), or, for those that
// return no error, the values nilGetters lists; none panics.
func TestNilComm(t *testing.T) {
	var c *goccl.Comm
	v := reflect.ValueOf(c)
	errType := reflect.TypeFor[error]()
	ctxType := reflect.TypeFor[context.Context]()
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		ft := m.Type // with the receiver as the first parameter
		args := []reflect.Value{v}
		for j := 1; j < ft.NumIn(); j++ {
			if ft.In(j) == ctxType {
				args = append(args, reflect.ValueOf(context.Background()))
			} else {
				args = append(args, reflect.Zero(ft.In(j)))
			}
		}
		var out []reflect.Value
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("(*Comm)(nil).%s panics: %v", m.Name, p)
				}
			}()
			out = m.Func.Call(args)
		}()
		if out == nil {
			continue
		}
		if n := ft.NumOut(); n > 0 && ft.Out(n-1) == errType {
			err, _ := out[n-1].Interface().(error)
			if !errors.Is(err, goccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil *Comm") || strings.Contains(err.Error(), "rank") {
				t.Errorf("(*Comm)(nil).%s: error %v, want ErrInvalidArgument for a nil *Comm", m.Name, err)
			}
			continue
		}
		want, ok := nilGetters[m.Name]
		if !ok {
			t.Errorf("(*Comm)(nil).%s returns no error: add what it gives to nilGetters", m.Name)
			continue
		}
		for j, o := range out {
			if j >= len(want) || !reflect.DeepEqual(o.Interface(), want[j]) {
				t.Errorf("(*Comm)(nil).%s result %d = %v, want %v", m.Name, j, o.Interface(), want)
			}
		}
	}
	// The generic functions reach the same methods; the functions that take
	// a *Comm check it too.
	if err := goccl.AllReduce(context.Background(), c, []float32{1}, []float32{1}, 1, goccl.Sum); !errors.Is(err, goccl.ErrInvalidArgument) {
		t.Errorf("AllReduce on a nil *Comm: %v", err)
	}
	for name, f := range map[string]func() error{
		"Register":  func() error { _, err := goccl.Register(c, []float32{1}); return err },
		"Alloc":     func() error { _, _, err := goccl.Alloc[float32](c, 1); return err },
		"NewWindow": func() error { _, err := goccl.NewWindow(context.Background(), c, 8); return err },
	} {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s on a nil *Comm panics: %v", name, p)
				}
			}()
			if err := f(); !errors.Is(err, goccl.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil *Comm") {
				t.Errorf("%s on a nil *Comm: %v, want ErrInvalidArgument for a nil *Comm", name, err)
			}
		}()
	}
}
