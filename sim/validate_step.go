package sim

import "fmt"

// validateStep predicts a step_s row: its workload column is a training
// configuration (ParseWorkload) run on the row's system, with Step's
// default assumptions (nothing taken from the rows).
func validateStep(res RowResult, sys systemMap, topo *Topology) RowResult {
	w, err := ParseWorkload(res.Workload)
	if err != nil {
		res.Status, res.Reason = StatusError, err.Error()
		return res
	}
	r, err := Step(topo, w, StepOptions{})
	if err != nil {
		res.Status, res.Reason = StatusError, err.Error()
		return res
	}
	sp := r.Split
	res.Model = fmt.Sprintf("%s: TP %d PP %d VP %d CP %d DP %d, %d micro-batches, %s", describe(sys, topo), sp.TP, sp.PP, sp.VP, sp.CP, sp.DP, sp.MicroBatches, sp.Schedule)
	res.ModelAlgo = fmt.Sprintf("step: MFU %.1f %%", 100*r.MFU)
	res.Status, res.Predicted = StatusOK, r.StepS
	res.Error = (r.StepS - res.Value) / res.Value
	return res
}

// ComputeEffFor is the compute efficiency (StepOptions.ComputeEff) at
// which Step predicts stepS seconds for w on topo, the other options as
// given: a calibration, to be used on other rows only (leave-one-out).
// Bisection to 1e-6; an error when no efficiency in (0, 1] reaches it.
func ComputeEffFor(topo *Topology, w Workload, opts StepOptions, stepS float64) (float64, error) {
	at := func(e float64) (float64, error) {
		opts.ComputeEff = e
		r, err := Step(topo, w, opts)
		return r.StepS, err
	}
	lo, hi := 1e-3, 1.0
	fast, err := at(hi)
	if err != nil {
		return 0, err
	}
	if fast > stepS {
		return 0, fmt.Errorf("sim: %s: %.4g s even at compute efficiency 1, above %.4g s", w.Model.Name, fast, stepS)
	}
	for hi-lo > 1e-6 {
		mid := (lo + hi) / 2
		t, err := at(mid)
		if err != nil {
			return 0, err
		}
		if t > stepS {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2, nil
}
