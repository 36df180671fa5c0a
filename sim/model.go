package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
)

// Model is a decoder-only transformer by its dimensions (the shapes of
// Megatron-LM's GPT and of Llama: Narayanan et al. 2021, arXiv 2104.04473
// §5.1, and Llama's config.json). Sizes are counts, not bytes.
type Model struct {
	Name    string `json:"name"`
	Layers  int    `json:"layers"`   // transformer blocks
	Hidden  int    `json:"hidden"`   // h, the model width
	FFN     int    `json:"ffn"`      // MLP inner width; 0 reads as 4h (GPT)
	Heads   int    `json:"heads"`    // attention heads
	KVHeads int    `json:"kv_heads"` // key/value heads (GQA); 0 reads as Heads (MHA)
	Vocab   int    `json:"vocab"`    // 0 reads as 51,200 (Megatron's GPT vocabulary, padded)
	Seq     int    `json:"seq"`      // sequence length, tokens
	// GatedMLP is a SwiGLU MLP (three FFN-wide matrices: Llama) rather
	// than GELU's two (GPT); it is set by a model given an ffn width
	// and named llama, or by "swiglu".
	GatedMLP  bool `json:"gated_mlp"`
	DtypeSize int  `json:"dtype_bytes"` // bytes per parameter and activation element: 2 (fp16/bf16) unless given
	// FlashAttention is a fused attention kernel (Dao et al. 2022,
	// arXiv 2205.14135): the s×s scores never reach HBM, and with the
	// causal mask the masked half of the blocks is skipped.
	FlashAttention bool `json:"flash_attention"`
	// Mixture of experts: Experts MLPs per MoE layer (0: dense), each
	// token routed to TopK of them (1 when 0), every MoEEvery-th layer an
	// MoE layer (1 when 0). An expert's MLP is FFN wide.
	Experts  int `json:"experts"`
	TopK     int `json:"top_k"`
	MoEEvery int `json:"moe_every"`
}

// Parallel is how a training job splits its GPUs and its batch: world =
// TP × PP × CP × DP (EP divides DP × TP's experts' ranks), as in
// Megatron-LM and NeMo.
type Parallel struct {
	TP        int    `json:"tp"`        // tensor parallel
	PP        int    `json:"pp"`        // pipeline stages
	VP        int    `json:"vp"`        // virtual stages per pipeline rank (interleaved 1F1B); 1 when 0
	CP        int    `json:"cp"`        // context parallel
	DP        int    `json:"dp"`        // data parallel; 0: the GPUs left
	EP        int    `json:"ep"`        // expert parallel; 1 when 0
	ZeRO      int    `json:"zero"`      // ZeRO stage 0-3 (distributed optimizer = 1)
	MBS       int    `json:"mbs"`       // micro-batch, sequences
	GBS       int    `json:"gbs"`       // global batch, sequences; 0: unknown
	Recompute string `json:"recompute"` // "none", "selective" or "full" activation recomputation
	Schedule  string `json:"schedule"`  // "1f1b" (default), "interleaved", "gpipe"
	// SP is Megatron's sequence parallelism (Korthikanti et al. 2022,
	// arXiv 2205.05198 §4.2.2): the layer norms and dropouts split along
	// the sequence over the TP ranks.
	SP bool `json:"sp"`
}

// Workload is a training configuration: the model and its split.
type Workload struct {
	Model    Model    `json:"model"`
	Parallel Parallel `json:"parallel"`
}

// Params returns the model's parameter count: per layer the attention
// projections (Q and O h×h each, K and V h×(h·KVHeads/Heads) each) and
// the MLP (2 or 3 matrices h×FFN), plus the embedding (vocab×h, tied
// with the output layer); biases and norms are left out (under 0.1 %).
func (m *Model) Params() float64 {
	h := float64(m.Hidden)
	kv := h * float64(m.kvHeads()) / float64(m.Heads)
	attn := 2*h*h + 2*h*kv
	mats := 2.0
	if m.GatedMLP {
		mats = 3
	}
	mlp := mats * h * float64(m.ffn())
	layers := float64(m.Layers)
	if m.Experts > 0 {
		moe := float64(m.moeLayers())
		return layers*attn + (layers-moe)*mlp + moe*(float64(m.Experts)*mlp+h*float64(m.Experts)) + float64(m.vocab())*h
	}
	return layers*(attn+mlp) + float64(m.vocab())*h
}

// moeLayers is the number of MoE layers: every MoEEvery-th of them.
func (m *Model) moeLayers() int {
	if m.Experts == 0 {
		return 0
	}
	return m.Layers / max(m.MoEEvery, 1)
}

func (m *Model) topK() int { return max(m.TopK, 1) }

// KVBytesPerToken is the key/value cache of one token across all layers:
// 2 (K and V) × layers × KV heads × head dimension × element size.
func (m *Model) KVBytesPerToken() float64 {
	headDim := float64(m.Hidden) / float64(m.Heads)
	return 2 * float64(m.Layers) * float64(m.kvHeads()) * headDim * float64(m.dtype())
}

func (m *Model) ffn() int {
	if m.FFN > 0 {
		return m.FFN
	}
	return 4 * m.Hidden
}

func (m *Model) kvHeads() int {
	if m.KVHeads > 0 {
		return m.KVHeads
	}
	return m.Heads
}

func (m *Model) vocab() int {
	if m.Vocab > 0 {
		return m.Vocab
	}
	return 51200
}

func (m *Model) dtype() int {
	if m.DtypeSize > 0 {
		return m.DtypeSize
	}
	return 2
}

// Validate reports the first dimension the model cannot use.
func (m *Model) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("sim: model %q: %s = %v: %s", m.Name, field, v, want)
	}
	switch {
	case m.Layers < 1:
		return bad("layers", m.Layers, "at least 1")
	case m.Hidden < 1:
		return bad("hidden", m.Hidden, "at least 1")
	case m.Heads < 1 || m.Hidden%m.Heads != 0:
		return bad("heads", m.Heads, fmt.Sprintf("at least 1, dividing hidden %d", m.Hidden))
	case m.KVHeads < 0 || m.KVHeads > 0 && m.Heads%m.KVHeads != 0:
		return bad("kv_heads", m.KVHeads, fmt.Sprintf("0 (as heads) or a divisor of heads %d", m.Heads))
	case m.FFN < 0:
		return bad("ffn", m.FFN, "0 (4 × hidden) or more")
	case m.Vocab < 0:
		return bad("vocab", m.Vocab, "0 (51,200) or more")
	case m.Seq < 1:
		return bad("seq", m.Seq, "at least 1")
	case m.DtypeSize < 0 || m.DtypeSize > 8:
		return bad("dtype_bytes", m.DtypeSize, "0 (2 bytes), 1, 2, 4 or 8")
	case m.Experts < 0:
		return bad("experts", m.Experts, "0 (dense) or more")
	case m.TopK < 0 || m.Experts > 0 && m.TopK > m.Experts:
		return bad("top_k", m.TopK, fmt.Sprintf("0 (1) up to experts %d", m.Experts))
	case m.MoEEvery < 0 || m.MoEEvery > m.Layers:
		return bad("moe_every", m.MoEEvery, fmt.Sprintf("0 (1) up to layers %d", m.Layers))
	}
	return nil
}

// ParseWorkload reads a training configuration written as the workload
// column of a validation CSV: a name, then words KEYvalue or KEY value
// (case-insensitive): L layers, h hidden, ffn, a or heads, kv KV heads,
// vocab, seq, mbs, gbs, TP, PP, VP, CP, DP, EP, ZeRO, experts, topk,
// moeevery; "full recompute", "selective recompute"; fp16, bf16, fp32,
// fp8; swiglu, gelu; "interleaved", "gpipe", "1f1b"; "flash" (fused
// attention), "sp" (sequence parallelism). "GPT-175B L96 h12288 a96 seq2048 mbs1 gbs64 TP8 PP8 full
// recompute fp16". A word it does not know is an error naming it.
func ParseWorkload(s string) (Workload, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Workload{}, fmt.Errorf("sim: workload: empty")
	}
	w := Workload{Model: Model{Name: fields[0]}, Parallel: Parallel{Recompute: "none"}}
	m, p := &w.Model, &w.Parallel
	ints := map[string]*int{
		"l": &m.Layers, "h": &m.Hidden, "ffn": &m.FFN, "a": &m.Heads, "heads": &m.Heads,
		"kv": &m.KVHeads, "vocab": &m.Vocab, "seq": &m.Seq, "mbs": &p.MBS, "gbs": &p.GBS,
		"tp": &p.TP, "pp": &p.PP, "vp": &p.VP, "cp": &p.CP, "dp": &p.DP, "ep": &p.EP, "zero": &p.ZeRO,
		"experts": &m.Experts, "topk": &m.TopK, "moeevery": &m.MoEEvery,
	}
	dtypes := map[string]int{"fp16": 2, "bf16": 2, "fp32": 4, "fp8": 1}
	for i := 1; i < len(fields); i++ {
		word := strings.ToLower(fields[i])
		if n, ok := dtypes[word]; ok {
			m.DtypeSize = n
			continue
		}
		switch word {
		case "full", "selective":
			if i+1 < len(fields) && strings.EqualFold(fields[i+1], "recompute") {
				p.Recompute = word
				i++
				continue
			}
		case "swiglu":
			m.GatedMLP = true
			continue
		case "gelu":
			m.GatedMLP = false
			continue
		case "flash":
			m.FlashAttention = true
			continue
		case "sp":
			p.SP = true
			continue
		case "interleaved", "gpipe", "1f1b":
			p.Schedule = word
			continue
		}
		key, val := splitKeyValue(word)
		if val == "" && i+1 < len(fields) {
			if _, err := strconv.Atoi(fields[i+1]); err == nil {
				val = fields[i+1]
				i++
			}
		}
		dst, ok := ints[key]
		if !ok || val == "" {
			return Workload{}, fmt.Errorf("sim: workload %q: word %q: want KEYvalue with KEY one of L, h, ffn, a, heads, kv, vocab, seq, mbs, gbs, TP, PP, VP, CP, DP, EP, ZeRO, experts, topk, moeevery, or fp16/bf16/fp32/fp8, full/selective recompute, swiglu, interleaved, gpipe, flash, sp", s, fields[i])
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 || n > math.MaxInt32 {
			return Workload{}, fmt.Errorf("sim: workload %q: %s = %q: want a count", s, key, val)
		}
		*dst = n
	}
	if m.FFN > 0 && strings.Contains(strings.ToLower(m.Name), "llama") {
		m.GatedMLP = true
	}
	if err := m.Validate(); err != nil {
		return Workload{}, err
	}
	return w, nil
}

// splitKeyValue splits "tp8" into "tp" and "8" (the digits at the end;
// a key itself ends in a letter).
func splitKeyValue(word string) (key, val string) {
	i := strings.LastIndexFunc(word, func(r rune) bool { return !unicode.IsDigit(r) })
	return word[:i+1], word[i+1:]
}
