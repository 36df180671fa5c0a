package launch

import (
	"bufio"
	"errors"
	"io"
	"sync"
)

// lineWriter copies a rank's output stream to out one whole line at a time,
// each line preceded by prefix. mu is shared by all the streams of a job so
// that lines from different ranks never mix.
type lineWriter struct {
	prefix []byte
	out    io.Writer
	mu     *sync.Mutex
	buf    []byte // prefix + the line being assembled
}

// copyFrom reads r to EOF (or error), writing each complete line as it comes.
// A final line without a newline is written with one added.
func (w *lineWriter) copyFrom(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	w.buf = append(w.buf[:0], w.prefix...)
	for {
		chunk, err := br.ReadSlice('\n')
		w.buf = append(w.buf, chunk...)
		switch {
		case err == nil:
			w.emit()
		case errors.Is(err, bufio.ErrBufferFull):
			// A very long line: keep assembling it.
		default:
			if len(w.buf) > len(w.prefix) {
				w.buf = append(w.buf, '\n')
				w.emit()
			}
			return
		}
	}
}

func (w *lineWriter) emit() {
	w.mu.Lock()
	w.out.Write(w.buf) // errors (a closed pipe downstream) must not stop the draining
	w.mu.Unlock()
	w.buf = append(w.buf[:0], w.prefix...)
}
