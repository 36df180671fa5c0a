package qp

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func connect(t *testing.T, m *Machine) {
	t.Helper()
	steps := []struct {
		a    Attr
		mask AttrMask
	}{
		{Attr{State: StateInit, Port: 1, AccessFlags: AccessRemoteWrite | AccessRemoteRead}, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{Attr{State: StateRTR, PathMTU: 1024, DestQPN: 0x22, RQPSN: 0xfffff0, MaxDestRdAtomic: 4, MinRNRTimer: 12},
			AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
		{Attr{State: StateRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxQPRdAtomic: 4},
			AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := m.Modify(&s.a, s.mask); err != nil {
			t.Fatal(err)
		}
		if m.State() != s.a.State {
			t.Fatalf("state %v after moving to %v", m.State(), s.a.State)
		}
	}
}

func TestConnectPath(t *testing.T) {
	m := NewMachine(0x11)
	connect(t, m)
	a := m.Attr()
	if a.PathMTU != 1024 || a.DestQPN != 0x22 || a.RQPSN != 0xfffff0 || a.SQPSN != 100 || a.Timeout != 14 || a.RNRRetry != 7 || a.Port != 1 {
		t.Errorf("attributes not kept: %+v", a)
	}
	// RTS -> SQD -> RTS, RTS -> RTS with an optional attribute.
	for _, s := range []State{StateSQD, StateRTS} {
		if err := m.Modify(&Attr{State: s}, AttrState); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Modify(&Attr{MinRNRTimer: 3}, AttrMinRNRTimer); err != nil || m.Attr().MinRNRTimer != 3 {
		t.Fatalf("RTS->RTS min_rnr_timer: %v", err)
	}
	// Any state -> ERR -> RESET, which forgets the attributes.
	if err := m.Modify(&Attr{State: StateErr}, AttrState); err != nil || m.State() != StateErr {
		t.Fatal(err)
	}
	if err := m.Modify(&Attr{State: StateReset}, AttrState); err != nil || m.Attr().PathMTU != 0 {
		t.Fatal(err)
	}
}

func TestModifyRefusals(t *testing.T) {
	init := func() *Machine {
		m := NewMachine(0x11)
		if err := m.Modify(&Attr{State: StateInit, Port: 1}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		return m
	}
	rtrMask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	for _, tc := range []struct {
		name string
		m    *Machine
		a    Attr
		mask AttrMask
		want string
	}{
		{"RESET to RTR", NewMachine(1), Attr{State: StateRTR}, AttrState, "RESET->RTR: not a valid transition"},
		{"missing", init(), Attr{State: StateRTR, PathMTU: 1024}, AttrState | AttrPathMTU | AttrAV, "missing required attribute(s) RQ_PSN, MIN_RNR_TIMER, MAX_DEST_RD_ATOMIC, DEST_QPN"},
		{"not allowed", init(), Attr{State: StateRTR, PathMTU: 1024}, rtrMask | AttrSQPSN, "attribute(s) SQ_PSN not allowed"},
		{"bad MTU", init(), Attr{State: StateRTR, PathMTU: 1500}, rtrMask, "path MTU 1500"},
		{"wide PSN", init(), Attr{State: StateRTR, PathMTU: 4096, RQPSN: 1 << 24}, rtrMask, "rq_psn 0x1000000 is wider than 24 bits"},
		{"rd atomic", init(), Attr{State: StateRTR, PathMTU: 4096, MaxDestRdAtomic: 17}, rtrMask, "max_dest_rd_atomic 17"},
		{"port", NewMachine(1), Attr{State: StateInit, Port: 2}, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags, "port 2 does not exist"},
		{"cur state", init(), Attr{State: StateErr, CurState: StateRTS}, AttrState | AttrCurState, "CUR_STATE says RTS, the QP is in INIT"},
		{"attrs with ERR", init(), Attr{State: StateErr}, AttrState | AttrPathMTU, "no attribute but STATE"},
		{"unknown state", init(), Attr{State: 9}, AttrState, "unknown target state"},
	} {
		before := tc.m.State()
		err := tc.m.Modify(&tc.a, tc.mask)
		var me *ModifyError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
			continue
		}
		if tc.m.State() != before {
			t.Errorf("%s: state changed to %v by a refused Modify", tc.name, tc.m.State())
		}
	}
	m := init()
	connect2 := Attr{State: StateRTR, PathMTU: 4096, Timeout: 32}
	if err := m.Modify(&connect2, rtrMask); err != nil {
		t.Fatalf("Timeout is not in the RTR mask, so its value is ignored: %v", err)
	}
	if err := m.Modify(&Attr{State: StateRTS, Timeout: 32}, AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic); err == nil {
		t.Error("timeout 32 accepted")
	}
}

func TestTimers(t *testing.T) {
	if d := RetryTimeout(14); d != 67108864*time.Nanosecond {
		t.Errorf("RetryTimeout(14) = %v, want 67.108864ms", d)
	}
	if RetryTimeout(0) != 0 || RetryTimeout(1) != 8192*time.Nanosecond {
		t.Error("RetryTimeout(0) must be 0 (infinite), RetryTimeout(1) 8.192µs")
	}
	for code, want := range map[uint8]time.Duration{0: 655360 * time.Microsecond, 1: 10 * time.Microsecond, 14: 1280 * time.Microsecond, 31: 491520 * time.Microsecond} {
		if got := RNRDelay(code); got != want {
			t.Errorf("RNRDelay(%d) = %v, want %v", code, got, want)
		}
	}
	for i := 2; i < 32; i++ {
		if RNRDelay(uint8(i)) <= RNRDelay(uint8(i-1)) {
			t.Errorf("RNR table not increasing at %d", i)
		}
	}
}
