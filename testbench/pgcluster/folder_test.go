package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/snip/snip-jobs/testbench/flock"
)

// A cluster lives in memory when /dev/shm is a tmpfs with room, and its
// Destroy leaves neither its folder nor its claim behind.
func TestAClusterLivesInMemoryWhenTheMachineHasRoom(t *testing.T) {
	c := create(t)
	inMem := strings.HasPrefix(c.Dir(), memoryRoot+"/")
	if want := inMemory(memoryRoot, memoryNeed); inMem != want {
		t.Fatalf("cluster folder %s: in memory %v, want %v (%s a tmpfs with %d GiB free)", c.Dir(), inMem, want, memoryRoot, memoryNeed>>30)
	}
	if !inMem {
		return
	}
	if _, err := os.Stat(c.Dir() + ".lock"); err != nil {
		t.Errorf("the folder's claim: %v", err)
	}
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{c.Dir(), c.Dir() + ".lock"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after Destroy (%v)", p, err)
		}
	}
}

// Only a tmpfs with the room asked for counts as memory.
func TestOnlyATmpfsWithRoomCountsAsMemory(t *testing.T) {
	if inMemory("/proc", 0) {
		t.Error("/proc (procfs) counted as memory")
	}
	if inMemory(memoryRoot, 1<<62) {
		t.Error("a tmpfs without the room asked for counted as memory")
	}
	if inMemory(filepath.Join(t.TempDir(), "missing"), 0) {
		t.Error("a missing folder counted as memory")
	}
}

// A folder whose claim no process holds (its process died before Destroy) is
// removed when the next folder is made; one whose claim is held stays.
func TestAFolderLeftByADeadProcessIsSweptAndAClaimedOneKept(t *testing.T) {
	ctx, root := context.Background(), t.TempDir()
	first, err := makeMemoryDir(ctx, root, "test-", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.release()
	parent := filepath.Dir(first.path)
	leave := func(name string) string {
		dir := filepath.Join(parent, name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir+".lock", nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dead, alive := leave("test-dead"), leave("test-alive")
	unlock, err := flock.Lock(ctx, alive+".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	second, err := makeMemoryDir(ctx, root, "test-", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer second.release()
	for _, p := range []string{dead, dead + ".lock"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was not swept (%v)", p, err)
		}
	}
	for _, p := range []string{alive, first.path} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("claimed folder %s was swept: %v", p, err)
		}
	}
}

// A parent folder another user could write to is refused: in a
// world-writable root, someone else may have made it first.
func TestAParentOthersMayWriteToIsRefused(t *testing.T) {
	root := t.TempDir()
	parent := filepath.Join(root, fmt.Sprintf("snip-jobs-pg-%d", os.Geteuid()))
	if err := os.Mkdir(parent, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o777); err != nil {
		t.Fatal(err)
	}
	if d, err := makeMemoryDir(context.Background(), root, "test-", nil); err == nil {
		d.release()
		t.Fatalf("made %s in a world-writable parent", d.path)
	}
}
