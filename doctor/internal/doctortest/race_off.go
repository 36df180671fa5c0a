//go:build !race

package doctortest

// RaceEnabled is false: this test binary runs without the race detector.
const RaceEnabled = false
