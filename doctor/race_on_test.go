//go:build race

package doctor

// raceEnabled: the race detector's instrumentation allocates on its own, so
// allocation bounds are checked only without it (scripts/test.sh runs both).
const raceEnabled = true
