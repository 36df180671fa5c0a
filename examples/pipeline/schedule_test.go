package main

import (
	"math"
	"testing"
)

func TestStageOpsSequences(t *testing.T) {
	for _, tc := range []struct {
		sch     Schedule
		p, m, s int
		want    string
	}{
		{GPipe, 4, 4, 0, "F0 F1 F2 F3 B0 B1 B2 B3"},
		{GPipe, 4, 4, 3, "F0 F1 F2 F3 B0 B1 B2 B3"},
		{OneFOneB, 4, 8, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"},
		{OneFOneB, 4, 8, 1, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7"},
		{OneFOneB, 4, 8, 3, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"},
		{OneFOneB, 4, 2, 0, "F0 F1 B0 B1"}, // fewer micro-batches than stages
		{OneFOneB, 1, 3, 0, "F0 B0 F1 B1 F2 B2"},
	} {
		ops, err := stageOps(tc.sch, tc.p, tc.m, tc.s)
		if err != nil {
			t.Fatal(err)
		}
		if got := formatOps(ops); got != tc.want {
			t.Errorf("%v p=%d m=%d stage %d: %s, want %s", tc.sch, tc.p, tc.m, tc.s, got, tc.want)
		}
	}
}

// TestStageOpsProperties: every micro-batch is forwarded once, then
// backwarded once, in micro-batch order; GPipe holds all m micro-batches at
// once, 1F1B at most p - stage.
func TestStageOpsProperties(t *testing.T) {
	for _, sch := range []Schedule{GPipe, OneFOneB} {
		for p := 1; p <= 6; p++ {
			for m := 1; m <= 12; m++ {
				for s := range p {
					ops, err := stageOps(sch, p, m, s)
					if err != nil {
						t.Fatal(err)
					}
					nextF, nextB := 0, 0
					for _, o := range ops {
						switch {
						case !o.Backward && o.MB == nextF:
							nextF++
						case o.Backward && o.MB == nextB && nextB < nextF:
							nextB++
						default:
							t.Fatalf("%v p=%d m=%d stage %d: %s out of order in %s", sch, p, m, s, o, formatOps(ops))
						}
					}
					if nextF != m || nextB != m {
						t.Fatalf("%v p=%d m=%d stage %d: %d forwards, %d backwards in %s", sch, p, m, s, nextF, nextB, formatOps(ops))
					}
					want := m
					if sch == OneFOneB {
						want = min(p-s, m)
					}
					if got := maxInFlight(ops); got != want {
						t.Errorf("%v p=%d m=%d stage %d: %d micro-batches in flight, want %d", sch, p, m, s, got, want)
					}
				}
			}
		}
	}
}

func TestStageOpsBadArguments(t *testing.T) {
	for _, a := range [][3]int{{0, 1, 0}, {2, 0, 0}, {2, 2, 2}, {2, 2, -1}} {
		if _, err := stageOps(GPipe, a[0], a[1], a[2]); err == nil {
			t.Errorf("stageOps(p=%d, m=%d, stage=%d): no error", a[0], a[1], a[2])
		}
	}
	if _, err := stageOps(Schedule(7), 2, 2, 0); err == nil {
		t.Error("unknown schedule: no error")
	}
}

// TestSimulatedBubble: in the discrete-event model (rendezvous messages, no
// communication time) neither schedule deadlocks with the SendRecv pairing of
// pipelinePass, and every stage's idle share is the formula (p-1)/(m+p-1)
// when a backward pass takes 2 forward passes (or 1).
func TestSimulatedBubble(t *testing.T) {
	for _, sch := range []Schedule{GPipe, OneFOneB} {
		for p := 1; p <= 6; p++ {
			for m := 1; m <= 12; m++ {
				for _, bwd := range []float64{1, 2} {
					idle, err := simulate(sch, p, m, 1, bwd)
					if err != nil {
						t.Fatal(err)
					}
					want := bubbleFormula(p, m)
					for s, got := range idle {
						if math.Abs(got-want) > 1e-12 {
							t.Errorf("%v p=%d m=%d backward %gx: stage %d idle %.4f, formula %.4f", sch, p, m, bwd, s, got, want)
						}
					}
				}
			}
		}
	}
}

// TestSimulateDetectsDeadlock: the model reports schedules whose messages
// cannot match.
func TestSimulateDetectsDeadlock(t *testing.T) {
	f := func(mb int) Op { return Op{MB: mb} }
	b := func(mb int) Op { return Op{Backward: true, MB: mb} }
	bad := [][]Op{{f(0), f(1), b(0), b(1)}, {f(1), f(0), b(0), b(1)}}
	if _, err := simulateOps(bad, 1, 2); err == nil {
		t.Fatal("no deadlock reported for stages that forward in different orders")
	}
	good := [][]Op{{f(0), f(1), b(0), b(1)}, {f(0), b(0), f(1), b(1)}}
	if _, err := simulateOps(good, 1, 2); err != nil {
		t.Fatal(err)
	}
}
