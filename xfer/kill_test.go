package xfer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/rdma"
)

// TestMain runs a target agent instead of the tests in a child process
// (XFER_TEST_TARGET=file): it registers the file as FILE memory and
// 64 MiB of Alloc DRAM, prints its metadata in base64 on a line, and serves
// until killed.
func TestMain(m *testing.M) {
	if path := os.Getenv("XFER_TEST_TARGET"); path != "" {
		os.Exit(targetMain(path))
	}
	os.Exit(m.Run())
}

func targetMain(path string) int {
	o := Options{Listen: "127.0.0.1:0"}
	if os.Getenv("XFER_TEST_TARGET_ROCE") == "1" {
		d, err := rdma.Open("127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		o.RDMA = d
	}
	a, err := NewAgent("victim", o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := OpenFile(path, 256<<20, false)
	if err == nil {
		_, err = a.RegisterFile(f, 0, 256<<20)
	}
	if err == nil {
		_, _, err = a.Alloc(64 << 20)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(base64.StdEncoding.EncodeToString(a.LocalMetadata()))
	select {}
}

func startTarget(t *testing.T, path string, roce bool) (*exec.Cmd, []byte) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "XFER_TEST_TARGET="+path)
	if roce {
		cmd.Env = append(cmd.Env, "XFER_TEST_TARGET_ROCE=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("target: %v", err)
	}
	md, err := base64.StdEncoding.DecodeString(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return cmd, md
}

// TestPeerKilled kills the target agent while 48 WRITE requests of 2 MiB
// are in flight: over TCP into its file, as copies into its Alloc memory
// mapped here, or as RDMA WRITEs into that memory: every request that was
// not done fails within 2 s with an error naming the agent, and every request
// reported done over TCP has all its bytes in the file.
func TestPeerKilled(t *testing.T) {
	for _, path := range []string{"tcp", "shm", "roce"} {
		t.Run(path, func(t *testing.T) { testPeerKilled(t, path) })
	}
}

func testPeerKilled(t *testing.T, path string) {
	file := filepath.Join(t.TempDir(), "victim.dat")
	cmd, blob := startTarget(t, file, path == "roce")
	o := Options{Streams: 2}
	if path == "roce" {
		o.RDMA, o.NoSHM = openDevice(t), true
	}
	ini := newAgent(t, "ini", o)
	name, err := ini.LoadRemoteMetadata(blob)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := decodeMetadata(blob)
	var fileDesc, memDesc Desc
	for _, r := range md.Regions {
		if r.Type == FILE {
			fileDesc = Desc{Addr: r.Addr, Len: r.Len, DevID: r.Dev}
		} else {
			memDesc = Desc{Addr: r.Addr, Len: r.Len}
		}
	}
	const reqs, size = 48, 2 << 20
	src := make([]byte, reqs*size)
	fill(src, 11)
	sd, _ := ini.RegisterDRAM(src)
	ctx := ctxT(t)
	var all []*XferReq
	for i := range reqs {
		var r *XferReq
		var err error
		if path == "tcp" {
			r, err = ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{sd.Sub(uint64(i*size), size)}, name, FILE, []Desc{fileDesc.Sub(uint64(i*size), size)}, nil)
		} else {
			off := uint64(i%32) * size
			r, err = ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{sd.Sub(uint64(i*size), size)}, name, DRAM, []Desc{memDesc.Sub(off, size)}, []byte("n"))
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	if path == "shm" && len(all[0].maps) == 0 {
		t.Fatal("the target's Alloc memory was not mapped")
	}
	if path == "roce" && all[0].chunks[0].lane != all[0].p.rdma {
		t.Fatal("the requests do not go by RDMA")
	}
	// Post from another goroutine (memory copies may be done in Post) and
	// kill once a few requests are through. Over shared memory Post copies
	// a request whole (2 MiB in well under a millisecond), so all 48 could
	// be done before the loss is seen: there the poster stops after the
	// first two and goes on once a probe request has failed (the agent saw
	// the loss), so the rest must fail.
	postErr := make([]error, len(all))
	posted, resume := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(posted)
		for i, r := range all {
			if i == 2 && path == "shm" {
				<-resume
			}
			_, postErr[i] = ini.PostXferReq(r)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		st := ini.Stats()
		if st.Requests >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	cmd.Wait()
	if path == "shm" {
		probe, err := ini.CreateXferReq(ctx, WRITE, DRAM, []Desc{sd.Sub(0, 1)}, name, DRAM, []Desc{memDesc.Sub(0, 1)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := ini.PostXferReq(probe); err != nil {
				break
			}
			if time.Since(killed) > 2*time.Second {
				t.Fatalf("posts to the killed agent still succeed %v after the kill", time.Since(killed))
			}
			probe.Wait(ctx)
			time.Sleep(time.Millisecond)
		}
		close(resume)
	}
	<-posted
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done, failed := 0, 0
	for i, r := range all {
		err := postErr[i]
		if err == nil {
			err = r.Wait(wctx)
		}
		if err == nil {
			done++
			if path == "tcp" {
				// bytes claimed landed must be in the file
				got := make([]byte, size)
				f, _ := os.Open(file)
				f.ReadAt(got, int64(i*size))
				f.Close()
				if !bytes.Equal(got, src[i*size:(i+1)*size]) {
					t.Fatalf("request %d reported done but its bytes are not in the file", i)
				}
			}
			continue
		}
		failed++
		var xe *Error
		if !errors.As(err, &xe) || xe.Agent != "victim" || !errors.Is(err, ErrPeerLost) {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if el := time.Since(killed); el > 2*time.Second {
		t.Fatalf("requests ended %v after the kill", el)
	}
	if failed == 0 {
		t.Fatalf("all %d requests done before the kill took effect", done)
	}
	t.Logf("%d done, %d failed; ended %v after the kill", done, failed, time.Since(killed).Round(time.Millisecond))
	// New requests to the dead agent fail at once, naming it.
	if _, err := ini.PostXferReq(all[0]); !errors.Is(err, ErrPeerLost) || !strings.Contains(err.Error(), `"victim"`) {
		t.Fatalf("post to the dead agent: %v", err)
	}
}
