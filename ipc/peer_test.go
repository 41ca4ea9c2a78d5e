package ipc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMain doubles as a client process for the tests that need another uid: with
// IPC_TEST_DIAL set it dials that socket, pings, and prints "ok" or the error.
func TestMain(m *testing.M) {
	if path := os.Getenv("IPC_TEST_DIAL"); path != "" {
		c, err := Dial(path, Options{Name: "other-uid"})
		if err == nil {
			err = c.Ping()
			c.Close()
		}
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				fmt.Printf("status=%d %v\n", e.Status, err)
			} else {
				fmt.Println(err)
			}
			os.Exit(1)
		}
		fmt.Println("ok")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// asOtherUser runs this test binary as a client under uid/gid (and groups), against
// the socket at path, and returns its output.
func asOtherUser(t *testing.T, path string, uid, gid uint32, groups []uint32) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process under another uid")
	}
	// The test binary sits in a private build directory; copy it where uid can run it.
	dir, err := os.MkdirTemp("", "ipcbin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ipc.test")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()
	cmd := exec.Command(bin)
	cmd.Env = []string{"IPC_TEST_DIAL=" + path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// openSocketDir makes the socket's directory reachable for other users, so that the
// daemon's own checks (socket mode, SO_PEERCRED) are what decides.
func openSocketDir(t *testing.T, path string) {
	t.Helper()
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
}

const nobody = 65534

func TestPeerOfAnotherUIDRefused(t *testing.T) {
	h := newTestHandler()
	// Mode 0666 lets the connection through, so SO_PEERCRED is what refuses it.
	_, path := startServer(t, h, ServerOptions{SocketMode: 0o666})
	openSocketDir(t, path)
	out, err := asOtherUser(t, path, nobody, nobody, nil)
	if err == nil || !strings.Contains(out, fmt.Sprintf("status=%d", StatusDenied)) || !strings.Contains(out, "uid 65534") {
		t.Fatalf("a peer of another uid was not refused: %v: %s", err, out)
	}
	// With the default mode 0600 the kernel refuses the connection outright.
	_, path2 := startServer(t, h, ServerOptions{})
	openSocketDir(t, path2)
	if fi, err := os.Stat(path2); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	out, err = asOtherUser(t, path2, nobody, nobody, nil)
	if err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("0600 socket: %v: %s", err, out)
	}
	// The daemon still serves its own uid.
	c := dial(t, path, Options{})
	if err := c.Ping(); err != nil {
		t.Fatal(err)
	}
}

func TestAllowGID(t *testing.T) {
	h := newTestHandler()
	const gid = 4242
	_, path := startServer(t, h, ServerOptions{AllowGIDs: []uint32{gid}})
	openSocketDir(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || st.Gid != gid {
		t.Fatalf("socket mode %v gid %d, want 0660 and %d", fi.Mode().Perm(), st.Gid, gid)
	}
	if out, err := asOtherUser(t, path, nobody, gid, nil); err != nil || out != "ok" {
		t.Fatalf("primary group %d: %v: %s", gid, err, out)
	}
	if out, err := asOtherUser(t, path, nobody, nobody, []uint32{gid}); err != nil || out != "ok" {
		t.Fatalf("supplementary group %d: %v: %s", gid, err, out)
	}
	if out, err := asOtherUser(t, path, nobody, nobody, nil); err == nil {
		t.Fatalf("a peer outside the group got in: %s", out)
	}
}
