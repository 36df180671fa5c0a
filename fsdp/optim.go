package fsdp

import "math"

// SGD is plain stochastic gradient descent: p -= LR * g. It has no state.
type SGD struct{ LR float32 }

// Step implements Optimizer.
func (o *SGD) Step(_ int, params, grads []float32) {
	for i, g := range grads {
		params[i] -= o.LR * g
	}
}

// StateBytes implements Optimizer: 0.
func (o *SGD) StateBytes() int64 { return 0 }

// Adam is Kingma and Ba's Adam (torch.optim.Adam without weight decay), its
// two moments kept per unit for the elements it is given: a shard under
// FSDP, so its state is 1/P of the model's. Applied elementwise, it gives
// the same result on a shard as on the whole vector.
type Adam struct {
	LR, Beta1, Beta2, Eps float64
	m, v                  map[int][]float32
	t                     map[int]int
}

// NewAdam returns Adam with PyTorch's defaults for the betas and eps.
func NewAdam(lr float64) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, m: map[int][]float32{}, v: map[int][]float32{}, t: map[int]int{}}
}

// Step implements Optimizer.
func (o *Adam) Step(unit int, params, grads []float32) {
	m, v := o.m[unit], o.v[unit]
	if len(m) != len(params) {
		m, v = make([]float32, len(params)), make([]float32, len(params))
		o.m[unit], o.v[unit] = m, v
	}
	o.t[unit]++
	t := float64(o.t[unit])
	c1, c2 := 1-math.Pow(o.Beta1, t), 1-math.Pow(o.Beta2, t)
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	for i, g := range grads {
		m[i] = b1*m[i] + (1-b1)*g
		v[i] = b2*v[i] + (1-b2)*g*g
		mh, vh := float64(m[i])/c1, float64(v[i])/c2
		params[i] -= float32(o.LR * mh / (math.Sqrt(vh) + o.Eps))
	}
}

// StateBytes implements Optimizer: the two moments, 8 bytes per element.
func (o *Adam) StateBytes() int64 {
	var n int64
	for _, m := range o.m {
		n += 8 * int64(len(m))
	}
	return n
}
