package goccl

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/goccl/goccl/internal/config"
)

// goccl's log goes through log/slog. Every record carries the attributes
// rank (int) and subsys (INIT, BOOTSTRAP, ENV, NET, SHM, P2P or COLL), and
// where it applies peer (int) or op (the operation kind). Levels: WARN and
// INFO are slog's; TRACE is slog.LevelDebug.
//
// Which records are made is settled once per communicator, at Init:
// warnings always; INFO (TRACE) lines when GOCCL_DEBUG is INFO (TRACE) and
// their subsystem is in GOCCL_DEBUG_SUBSYS (like NCCL_DEBUG and
// NCCL_DEBUG_SUBSYS). They go to the logger given by WithLogger, else to a
// text handler (logHandler) that writes NCCL-like lines on stderr or in
// GOCCL_DEBUG_FILE. With WithLogger and GOCCL_DEBUG unset, the logger's own
// level (as its handler reports it at Init) decides instead of GOCCL_DEBUG.

// LevelTrace is the slog level of goccl's TRACE records (GOCCL_DEBUG=TRACE).
const LevelTrace = slog.LevelDebug

// subsys is a set of log subsystems (GOCCL_DEBUG_SUBSYS).
type subsys uint8

const (
	subInit subsys = 1 << iota
	subBootstrap
	subEnv
	subNet
	subShm
	subP2P
	subColl

	subAll subsys = 1<<iota - 1
)

// subsysNames are the subsystems' names, by bit; GOCCL_DEBUG_SUBSYS's
// words are these and ALL.
var subsysNames = [...]string{"INIT", "BOOTSTRAP", "ENV", "NET", "SHM", "P2P", "COLL"}

func (s subsys) String() string {
	for i, n := range subsysNames {
		if s == 1<<i {
			return n
		}
	}
	return fmt.Sprintf("subsys(%#x)", uint8(s))
}

// subsysNamed returns the subsystem called name (case as declared), or
// subAll for "ALL", or 0.
func subsysNamed(name string) subsys {
	if name == "ALL" {
		return subAll
	}
	for i, n := range subsysNames {
		if n == name {
			return 1 << i
		}
	}
	return 0
}

// logger makes a communicator's log records (see above). Its fields are
// fixed at Init, so that the check made on the hot path (on) reads two
// fields and allocates nothing.
type logger struct {
	min  slog.Level // the least level of the records made (warnings are always made)
	mask subsys     // the subsystems whose INFO and TRACE records are made
	sl   *slog.Logger
}

// newLogger makes rank's logger: onto user when not nil, else onto the
// text handler (stderr or GOCCL_DEBUG_FILE). It warns about a GOCCL_DEBUG
// or GOCCL_DEBUG_SUBSYS it does not understand and logs (ENV, INFO) the
// goccl variables set in the environment (the job token's value hidden).
func newLogger(rank int, user *slog.Logger) *logger {
	l := &logger{min: slog.LevelWarn}
	var warns []string
	level, levelErr := config.Debug.Word()
	if levelErr != nil {
		warns = append(warns, fmt.Sprintf("%v; using WARN", levelErr))
	}
	switch level {
	case "INFO":
		l.min = slog.LevelInfo
	case "TRACE":
		l.min = LevelTrace
	}
	if user != nil {
		l.sl = user
		if _, set := config.Debug.Lookup(); !set {
			l.min = slog.LevelWarn
			for _, lv := range []slog.Level{slog.LevelInfo, LevelTrace} {
				if user.Enabled(context.Background(), lv) {
					l.min = lv
				}
			}
		}
	} else {
		h, err := defaultHandler()
		if err != nil {
			warns = append(warns, err.Error())
		}
		l.sl = slog.New(h)
	}
	l.sl = l.sl.With(slog.Int("rank", rank))
	words, invert, err := config.DebugSubsys.WordList()
	if err != nil {
		warns = append(warns, fmt.Sprintf("%v; ignoring those", err))
	}
	l.mask = 0
	for _, w := range words {
		l.mask |= subsysNamed(w)
	}
	if invert {
		l.mask = subAll &^ l.mask
	}
	for _, w := range warns {
		l.Warnf(subEnv, "%s", w)
	}
	if l.on(slog.LevelInfo, subEnv) {
		for _, v := range config.All() {
			if s, ok := v.Lookup(); ok {
				if v == config.JobToken {
					s = "(a secret, not shown)"
				}
				l.Infof(subEnv, "%s set by environment to %s", v.Name, s)
			}
		}
	}
	return l
}

// on reports whether a record of this level and subsystem is made.
func (l *logger) on(level slog.Level, s subsys) bool {
	return level >= slog.LevelWarn || level >= l.min && l.mask&s != 0
}

// log makes a record when on says so: the message made from format and
// args, with the attributes rank, subsys and attrs.
func (l *logger) log(level slog.Level, s subsys, attrs []slog.Attr, format string, args ...any) {
	if !l.on(level, s) {
		return
	}
	all := make([]slog.Attr, 0, 1+len(attrs))
	all = append(all, slog.String("subsys", s.String()))
	all = append(all, attrs...)
	l.sl.LogAttrs(context.Background(), level, fmt.Sprintf(format, args...), all...)
}

// Infof and Warnf make a record of subsystem s without other attributes.
func (l *logger) Infof(s subsys, format string, args ...any) {
	l.log(slog.LevelInfo, s, nil, format, args...)
}

func (l *logger) Warnf(s subsys, format string, args ...any) {
	l.log(slog.LevelWarn, s, nil, format, args...)
}

// bootstrapLog is the log function of the bootstrap's Params: its
// subsystems are named ("NET", "SHM", "BOOTSTRAP", ...).
func (l *logger) bootstrapLog(level slog.Level, sub string, attrs []slog.Attr, format string, args ...any) {
	s := subsysNamed(strings.ToUpper(sub))
	if s == 0 || s == subAll {
		s = subInit
	}
	l.log(level, s, attrs, format, args...)
}
