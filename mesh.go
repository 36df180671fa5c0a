package goccl

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Mesh arranges a communicator's ranks in an n-dimensional grid and gives
// each dimension, by name, the communicator of the ranks that differ only in
// that coordinate: PyTorch's DeviceMesh (init_device_mesh). With shape
// [2, 4] and names ["replicate", "shard"], the 8 ranks form 2 rows of 4;
// m.Comm("shard") is this rank's row (4 ranks: sharded data parallelism
// inside it) and m.Comm("replicate") its column (2 ranks: gradients
// averaged across the replicas): HSDP.
//
// Ranks are laid out in row-major order, as torch.arange(world).view(shape):
// rank r has coordinates unravel(r, shape), the last dimension varying
// fastest, and in dimension d's communicator it is rank Coord(d).
//
// The rule that keeps interleaved operations free of deadlock is the one for
// a single communicator, applied per dimension: every rank of a dimension's
// communicator calls that communicator's operations in the same order. Each
// dimension's communicator has its own links, queue of non-blocking
// operations and worker, so non-blocking operations issued on several
// dimensions progress at the same time and may be waited for in any order.
// Blocking operations on several dimensions are also safe when every rank
// runs the same program (SPMD), calling the mesh's operations in the same
// order: a rank blocked in dimension d's operation waits only for ranks of
// its d-group, which reach the same call without waiting for it.
type Mesh struct {
	parent *Comm
	shape  []int
	names  []string
	coords []int
	comms  []*Comm
}

// NewMesh splits c into one communicator per dimension of shape (see Mesh).
// Every rank of c must call it, with the same shape and names, in the same
// order relative to c's other Splits. shape's product must be c.Size();
// names are the dimensions' names, distinct and not empty. The mesh's
// communicators are new ones (Split); c stays usable and must stay open
// while NewMesh runs. Close closes the mesh's communicators, not c.
func NewMesh(ctx context.Context, c *Comm, shape []int, names []string) (*Mesh, error) {
	if c == nil {
		return nil, nilComm("NewMesh")
	}
	if err := checkMesh(c.size, shape, names); err != nil {
		return nil, &Error{Rank: c.rank, Op: "NewMesh", Err: fmt.Errorf("%w: %v", ErrInvalidArgument, err)}
	}
	m := &Mesh{parent: c, shape: slices.Clone(shape), names: slices.Clone(names), coords: make([]int, len(shape))}
	stride := 1
	strides := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		strides[d] = stride
		m.coords[d] = c.rank / stride % shape[d]
		stride *= shape[d]
	}
	for d := range shape {
		// The ranks of this rank's d-group share every coordinate but d:
		// its rank with coordinate d zeroed names the group.
		color := c.rank - m.coords[d]*strides[d]
		sub, err := c.Split(ctx, color, m.coords[d])
		if err != nil {
			m.Close()
			return nil, &Error{Rank: c.rank, Op: "NewMesh", Err: fmt.Errorf("dimension %q: %w", names[d], err)}
		}
		m.comms = append(m.comms, sub)
	}
	return m, nil
}

// checkMesh checks a mesh's shape and names against the world size.
func checkMesh(world int, shape []int, names []string) error {
	if len(shape) == 0 || len(shape) != len(names) {
		return fmt.Errorf("mesh shape %v and names %q must have the same length, at least 1", shape, names)
	}
	prod := 1
	for d, n := range shape {
		if n < 1 {
			return fmt.Errorf("mesh dimension %q has size %d, must be >= 1", names[d], n)
		}
		prod *= n
		if names[d] == "" {
			return fmt.Errorf("mesh dimension %d has no name", d)
		}
		if slices.Index(names, names[d]) != d {
			return fmt.Errorf("mesh dimension name %q is used twice", names[d])
		}
	}
	if prod != world {
		return fmt.Errorf("mesh shape %v holds %d ranks, the communicator %d", shape, prod, world)
	}
	return nil
}

// Comm is the communicator of dimension name: the ranks that share this
// rank's coordinates in every other dimension, ranked by their coordinate
// in this one. It is nil when the mesh has no dimension of that name (a
// collective on a nil *Comm returns an error).
func (m *Mesh) Comm(name string) *Comm {
	if d := m.Dim(name); d >= 0 && d < len(m.comms) {
		return m.comms[d]
	}
	return nil // no such dimension, or closed
}

// Dim is the index of dimension name, or -1.
func (m *Mesh) Dim(name string) int { return slices.Index(m.names, name) }

// Coord is this rank's coordinate in dimension name (its rank in
// Comm(name)), or -1 when the mesh has no such dimension.
func (m *Mesh) Coord(name string) int {
	if d := m.Dim(name); d >= 0 {
		return m.coords[d]
	}
	return -1
}

// Coords is this rank's coordinates, one per dimension (a copy).
func (m *Mesh) Coords() []int { return slices.Clone(m.coords) }

// Shape is the mesh's shape (a copy).
func (m *Mesh) Shape() []int { return slices.Clone(m.shape) }

// Names is the dimensions' names (a copy).
func (m *Mesh) Names() []string { return slices.Clone(m.names) }

// Parent is the communicator the mesh was made from.
func (m *Mesh) Parent() *Comm { return m.parent }

// Close closes the mesh's communicators (not the parent) and returns the
// errors they returned, joined.
func (m *Mesh) Close() error {
	var errs []error
	for _, c := range m.comms {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	m.comms = nil
	return errors.Join(errs...)
}
