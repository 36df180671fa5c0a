//go:build race

package doctortest

// RaceEnabled: the race detector's instrumentation allocates on its own,
// so allocation bounds are checked only without it (scripts/test.sh runs
// both).
const RaceEnabled = true
