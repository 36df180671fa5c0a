package goccl_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/rendezvous"
)

// logRecord is one record a recorder received: its level, message and
// attributes (those of Logger.With included) as strings.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// recorder is a slog.Handler that keeps every record at or above its level.
type recorder struct {
	level slog.Level
	mu    *sync.Mutex
	recs  *[]logRecord
	attrs []slog.Attr
}

func newRecorder(level slog.Level) *recorder {
	return &recorder{level: level, mu: new(sync.Mutex), recs: new([]logRecord)}
}

func (h *recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &n
}

func (h *recorder) WithGroup(string) slog.Handler { return h }

func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, rec)
	return nil
}

func (h *recorder) records() []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]logRecord(nil), *h.recs...)
}

// logRanks runs 2 goroutine ranks over TCP (options added to Init's) through
// an AllReduce and a Close.
func logRanks(t *testing.T, opts func(r int) []goccl.Option) {
	t.Helper()
	t.Setenv("GOCCL_SHM_DISABLE", "1")
	store := rendezvous.NewMemStore()
	defer store.Close()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range errs {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			o := append([]goccl.Option{goccl.WithRank(r), goccl.WithWorldSize(2), goccl.WithStore(store),
				goccl.WithTimeout(time.Minute)}, opts(r)...)
			c, err := goccl.Init(context.Background(), o...)
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			buf := make([]float32, 1024)
			errs[r] = goccl.AllReduce(context.Background(), c, buf, buf, len(buf), goccl.Sum)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestLogFileAndSubsys: GOCCL_DEBUG_FILE with %h and %p names the file the
// text log goes to (created, NCCL-like lines with the rank and subsystem);
// GOCCL_DEBUG_SUBSYS keeps the INFO lines of the subsystems it names, or
// with ^ of all others.
func TestLogFileAndSubsys(t *testing.T) {
	host, _ := os.Hostname()
	pid := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		subsys      string
		want, unwan []string
	}{
		{"", []string{" INFO INIT init: 2 ranks", " INFO NET peer %o via tcp", " INFO COLL AllReduce uses ", " INFO ENV GOCCL_SHM_DISABLE set by environment to 1"}, nil},
		{"INIT", []string{" INFO INIT init: 2 ranks"}, []string{" NET ", " COLL ", " ENV "}},
		{"net,coll", []string{" INFO NET peer %o via tcp", " INFO COLL AllReduce uses "}, []string{" INIT ", " ENV "}},
		{"^NET", []string{" INFO INIT init: 2 ranks", " INFO COLL AllReduce uses "}, []string{" NET ", "via tcp"}},
		{"^NET,COLL", []string{" INFO INIT init: 2 ranks"}, []string{" NET ", " COLL "}},
	} {
		t.Run("subsys="+tc.subsys, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("GOCCL_DEBUG", "INFO")
			t.Setenv("GOCCL_DEBUG_SUBSYS", tc.subsys)
			t.Setenv("GOCCL_DEBUG_FILE", filepath.Join(dir, "goccl.%h.%p.log"))
			t.Setenv("GOCCL_JOB_TOKEN", "log-test-secret")
			logRanks(t, func(int) []goccl.Option { return nil })
			b, err := os.ReadFile(filepath.Join(dir, "goccl."+host+"."+pid+".log"))
			if err != nil {
				t.Fatalf("GOCCL_DEBUG_FILE with %%h and %%p: %v", err)
			}
			out := string(b)
			if strings.Contains(out, "log-test-secret") {
				t.Errorf("the job token is in the log:\n%s", out)
			}
			for _, r := range []string{"0", "1"} {
				prefix := host + ":" + pid + " [rank " + r + "] goccl"
				for _, w := range tc.want {
					w = strings.ReplaceAll(w, "%o", map[string]string{"0": "1", "1": "0"}[r])
					if !strings.Contains(out, prefix+w) {
						t.Errorf("no %q line of rank %s in:\n%s", w, r, out)
					}
				}
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if !strings.HasPrefix(line, host+":"+pid+" [rank ") {
					t.Errorf("line %q is not host:pid [rank R] ...", line)
				}
				for _, u := range tc.unwan {
					if strings.Contains(line, " INFO") && strings.Contains(line, u) {
						t.Errorf("GOCCL_DEBUG_SUBSYS=%s: line %q has %q", tc.subsys, line, u)
					}
				}
			}
		})
	}
}

// TestWithLogger: the program's logger gets the records, each with the
// rank attribute (and peer or op where they apply); GOCCL_DEBUG_FILE is
// then not used, and with GOCCL_DEBUG unset the logger's level decides.
func TestWithLogger(t *testing.T) {
	for _, tc := range []struct {
		debug  string
		level  slog.Level
		wantOn bool
	}{{"", slog.LevelInfo, true}, {"", slog.LevelWarn, false}, {"WARN", slog.LevelDebug, false}, {"INFO", slog.LevelInfo, true}} {
		t.Run(fmt.Sprintf("debug=%s/level=%v", tc.debug, tc.level), func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("GOCCL_DEBUG", tc.debug)
			t.Setenv("GOCCL_DEBUG_SUBSYS", "")
			t.Setenv("GOCCL_DEBUG_FILE", filepath.Join(dir, "unused.log"))
			recs := []*recorder{newRecorder(tc.level), newRecorder(tc.level)}
			logRanks(t, func(r int) []goccl.Option { return []goccl.Option{goccl.WithLogger(slog.New(recs[r]))} })
			if _, err := os.Stat(filepath.Join(dir, "unused.log")); err == nil {
				t.Error("GOCCL_DEBUG_FILE was created although WithLogger was given")
			}
			for r, h := range recs {
				peer, op := false, false
				rs := h.records()
				for _, rec := range rs {
					if rec.attrs["rank"] != strconv.Itoa(r) || rec.attrs["subsys"] == "" {
						t.Errorf("rank %d's record %q has rank %q subsys %q", r, rec.msg, rec.attrs["rank"], rec.attrs["subsys"])
					}
					if strings.Contains(rec.msg, "via tcp") {
						peer = rec.attrs["peer"] == strconv.Itoa(1-r) && rec.attrs["subsys"] == "NET"
					}
					if strings.Contains(rec.msg, "AllReduce uses") {
						op = rec.attrs["op"] == "AllReduce" && rec.attrs["subsys"] == "COLL"
					}
				}
				if tc.wantOn && (!peer || !op) {
					t.Errorf("rank %d: records with peer %v, with op %v: %v", r, peer, op, rs)
				}
				if !tc.wantOn && len(rs) != 0 {
					t.Errorf("rank %d: INFO records although off: %v", r, rs)
				}
			}
		})
	}
}

// TestLogUnknownLevel: an unknown GOCCL_DEBUG level or GOCCL_DEBUG_SUBSYS
// name is warned about (subsystem ENV), and Init goes on.
func TestLogUnknownLevel(t *testing.T) {
	t.Setenv("GOCCL_DEBUG", "LOUD")
	t.Setenv("GOCCL_DEBUG_SUBSYS", "INIT,GRAPH")
	t.Setenv("GOCCL_DEBUG_FILE", "")
	h := newRecorder(slog.LevelDebug)
	c, err := goccl.Init(context.Background(), goccl.WithLogger(slog.New(h)))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	var level, subsys bool
	for _, rec := range h.records() {
		if rec.level != slog.LevelWarn || rec.attrs["subsys"] != "ENV" || rec.attrs["rank"] != "0" {
			t.Errorf("record %q: level %v, attributes %v; want only ENV warnings of rank 0", rec.msg, rec.level, rec.attrs)
		}
		level = level || strings.Contains(rec.msg, `GOCCL_DEBUG="LOUD"`) && strings.Contains(rec.msg, "using WARN")
		subsys = subsys || strings.Contains(rec.msg, "GOCCL_DEBUG_SUBSYS") && strings.Contains(rec.msg, "unknown GRAPH")
	}
	if !level || !subsys {
		t.Errorf("warned about the level %v, about the subsystem %v: %v", level, subsys, h.records())
	}
}
