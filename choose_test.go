package goccl_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/algo"
	"github.com/goccl/goccl/internal/config"
)

// TestAlgoWordsAreSchedules: every word GOCCL_ALGO accepts names an
// AllReduce row of the schedule table (no map of its own translates them).
func TestAlgoWordsAreSchedules(t *testing.T) {
	for _, w := range config.Algo.Words {
		a, err := algo.ParseForced(w)
		if err != nil || algo.Lookup(algo.KindAllReduce, a) == nil {
			t.Errorf("GOCCL_ALGO=%s: %q %v, want an AllReduce schedule", w, a, err)
		}
	}
	if _, err := algo.ParseForced("bogus"); err == nil {
		t.Error("ParseForced(bogus) succeeded")
	}
}

// TestForcedAlgoWarnsOnce: a GOCCL_ALGO that cannot run on the
// communicator (hier on one host, direct over TCP) is reported once, by
// rank 0 at Init, naming the variable, its value and what runs instead,
// and AllReduce runs the tuner's choice (recursive doubling for 2 ranks); a
// forced algorithm that can run is not reported and runs.
func TestForcedAlgoWarnsOnce(t *testing.T) {
	for _, tc := range []struct {
		forced, runs string
		warns        bool
	}{{"hier", "rd", true}, {"direct", "rd", true}, {"ring", "ring", false}, {"", "rd", false}} {
		t.Run("algo="+tc.forced, func(t *testing.T) {
			t.Setenv("GOCCL_ALGO", tc.forced)
			t.Setenv("GOCCL_DEBUG", "INFO")
			t.Setenv("GOCCL_DEBUG_SUBSYS", "")
			recs := []*recorder{newRecorder(slog.LevelInfo), newRecorder(slog.LevelInfo)}
			logRanks(t, func(r int) []goccl.Option { return []goccl.Option{goccl.WithLogger(slog.New(recs[r]))} })
			for r, h := range recs {
				warned, uses := 0, ""
				for _, rec := range h.records() {
					if rec.level == slog.LevelWarn && strings.Contains(rec.msg, config.Algo.Name) {
						warned++
						if want := config.Algo.Name + "=" + tc.forced + " cannot run"; !strings.Contains(rec.msg, want) || !strings.Contains(rec.msg, "tuner's choice") {
							t.Errorf("rank %d: warning %q, want %q and what runs instead", r, rec.msg, want)
						}
					}
					if m, ok := strings.CutPrefix(rec.msg, "AllReduce uses "); ok {
						uses, _, _ = strings.Cut(m, " ")
					}
				}
				want := 0
				if tc.warns && r == 0 {
					want = 1
				}
				if warned != want {
					t.Errorf("rank %d: %d warnings about %s, want %d", r, warned, config.Algo.Name, want)
				}
				if uses != tc.runs {
					t.Errorf("rank %d: AllReduce uses %q, want %q", r, uses, tc.runs)
				}
			}
		})
	}
}
