package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDataParallelEqualsOneReplica: the DataParallel pattern's summed
// gradient over 3 replicas (an uneven split of 37 samples) equals the
// gradient of one replica on the whole batch, and the replicas end a step
// with the main replica's parameters of before the update.
func TestDataParallelEqualsOneReplica(t *testing.T) {
	train, _ := loadForTest(t)
	sizes := []int{784, 32, 10}
	idx := make([]int, 37)
	for i := range idx {
		idx[i] = 3 * i
	}
	one := newDataParallel(sizes, 1, 1e-3, 1)
	three := newDataParallel(sizes, 1, 1e-3, 3)
	before := append([]float32(nil), three.replicas[0].Params...)
	l1, l3 := one.step(train, idx), three.step(train, idx)
	if d := relDiff(three.grads[0], one.grads[0]); d > 1e-5 {
		t.Errorf("gradient of 3 replicas differs from one replica's by %.2g", d)
	}
	if d := (l3 - l1) / l1; d > 1e-6 || d < -1e-6 {
		t.Errorf("loss %g with 3 replicas, %g with one", l3, l1)
	}
	if d := relDiff(three.replicas[2].Params, before); d != 0 {
		t.Errorf("replica 2 does not hold the main replica's parameters of the step (differs by %.2g)", d)
	}
	if d := relDiff(three.replicas[0].Params, one.replicas[0].Params); d > 1e-5 {
		t.Errorf("updated parameters differ by %.2g", d)
	}
}

// TestRunDataParallel runs -dataparallel 2 through the command's entry
// point: no communicator, one summary line.
func TestRunDataParallel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	if _, err := run(ctx, []string{"-dataparallel", "2", "-steps", "30", "-hidden", "32"}, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "summary: mode=dataparallel replicas=2 batch=128 steps=30 ") || !strings.Contains(s, "final test accuracy: ") {
		t.Errorf("output:\n%s", s)
	}
	if _, err := parseFlags([]string{"-dataparallel", "2", "-elastic"}); err == nil {
		t.Error("-dataparallel with -elastic: no error")
	}
}
