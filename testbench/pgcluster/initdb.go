package pgcluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// initdbArgs are initdb's options after -D: the same for every cluster.
var initdbArgs = []string{"-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"}

// initDataDir fills the cluster's data directory the way initdb does. initdb
// costs about a second of CPU here (the bootstrap and the import of every
// collation), a copy of its output a tenth of that, and its output is the same
// for the same server binaries and options but for the system identifier. So
// the first cluster's pristine output is kept in the user cache folder and
// later clusters start from a copy given an identifier of its own. Without a
// cache folder, or if the copy fails, initdb runs as before.
func (c *Cluster) initDataDir() error {
	pristine, keyErr := pristinePath(c.bindir)
	if keyErr == nil {
		err := c.copyPristine(pristine)
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			// A damaged entry: make a new one below.
			os.RemoveAll(pristine)
		}
		if err := os.RemoveAll(c.dataDir()); err != nil {
			return err
		}
	}
	initdb := c.command("initdb", append([]string{"-D", c.dataDir()}, initdbArgs...)...)
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if keyErr == nil {
		keep(c.dataDir(), pristine) // best effort: without it the next cluster runs initdb
	}
	return nil
}

// pristinePath is where the initdb output of the server binaries in bindir is
// kept: a folder named after what the output depends on, so that an upgraded
// PostgreSQL gets a new one.
func pristinePath(bindir string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintln(h, "pgcluster initdb 1", bindir, strings.Join(initdbArgs, " "))
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(bindir, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintln(h, name, fi.Size(), fi.ModTime().UnixNano())
	}
	return filepath.Join(base, "snip-jobs", "pg-initdb", hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// keep copies the fresh data directory dir to the cache entry pristine,
// whole or not at all (a rename); a parallel process may win the race.
func keep(dir, pristine string) {
	parent := filepath.Dir(pristine)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-")
	if err != nil {
		return
	}
	defer os.RemoveAll(tmp)
	if copyTree(dir, filepath.Join(tmp, "data"), nil) == nil {
		_ = os.Rename(filepath.Join(tmp, "data"), pristine)
	}
}

// copyPristine copies the cache entry to the cluster's data directory, owned
// by the server's user, and gives it a system identifier of its own.
func (c *Cluster) copyPristine(pristine string) error {
	if _, err := os.Stat(pristine); err != nil {
		return err
	}
	if err := copyTree(pristine, c.dataDir(), c.cred); err != nil {
		return fmt.Errorf("copy %s: %w", pristine, err)
	}
	return newSystemIdentifier(c.dataDir(), systemIdentifier(time.Now()))
}

// copyTree copies the tree src to dst (os.CopyFS), dst itself private as
// PostgreSQL requires of a data directory, everything owned by cred's user
// (nil: ours).
func copyTree(src, dst string, cred *syscall.Credential) error {
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		return err
	}
	if err := os.Chmod(dst, 0o700); err != nil {
		return err
	}
	if cred == nil {
		return nil
	}
	return filepath.WalkDir(dst, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, int(cred.Uid), int(cred.Gid))
	})
}

// systemIdentifier makes an identifier the way initdb does (BootStrapXLOG):
// seconds, microseconds and the low bits of the process id.
func systemIdentifier(now time.Time) uint64 {
	return uint64(now.Unix())<<32 | uint64(now.Nanosecond()/1000)<<12 | uint64(os.Getpid()&0xFFF)
}

// The places a fresh data directory keeps its system identifier: the first
// field of pg_control, whose CRC-32C follows the fields it covers, and the
// long page header that starts each WAL segment (xlp_sysid). The server
// refuses to start when the two disagree, and so would catch a miss here.
// Both are in the machine's byte order: little-endian on amd64 and arm64.
const (
	walInfoOffset   = 2  // xlp_info, after xlp_magic
	walLongHeader   = 2  // XLP_LONG_HEADER in xlp_info
	walSysidOffset  = 24 // xlp_sysid in XLogLongPageHeaderData
	controlMaxBytes = 512
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// newSystemIdentifier rewrites the system identifier of the stopped data
// directory dir to id.
func newSystemIdentifier(dir string, id uint64) error {
	ctlPath := filepath.Join(dir, "global", "pg_control")
	ctl, err := os.ReadFile(ctlPath)
	if err != nil {
		return err
	}
	at := controlCRCOffset(ctl)
	if at < 0 {
		return fmt.Errorf("%s: no CRC-32C found in the first %d bytes: not a pg_control this code knows", ctlPath, controlMaxBytes)
	}
	old := ctl[:8:8]
	segs, err := filepath.Glob(filepath.Join(dir, "pg_wal", strings.Repeat("[0-9A-F]", 24)))
	if err != nil {
		return err
	}
	for _, seg := range segs {
		if err := rewriteWALSysid(seg, old, id); err != nil {
			return err
		}
	}
	fresh := bytes.Clone(ctl)
	binary.LittleEndian.PutUint64(fresh, id)
	binary.LittleEndian.PutUint32(fresh[at:], crc32.Checksum(fresh[:at], castagnoli))
	return os.WriteFile(ctlPath, fresh, 0o600)
}

// controlCRCOffset is the offset of pg_control's CRC: the first place whose
// four bytes are the CRC-32C of every byte before them; -1 if none.
func controlCRCOffset(ctl []byte) int {
	for at := 8; at+4 <= min(len(ctl), controlMaxBytes); at += 4 {
		if crc32.Checksum(ctl[:at], castagnoli) == binary.LittleEndian.Uint32(ctl[at:]) {
			return at
		}
	}
	return -1
}

// rewriteWALSysid writes id over the identifier old in the long page header
// that starts the WAL segment seg.
func rewriteWALSysid(seg string, old []byte, id uint64) error {
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, walSysidOffset+8)
	if _, err := io.ReadFull(f, head); err != nil {
		return fmt.Errorf("%s: %w", seg, err)
	}
	info := binary.LittleEndian.Uint16(head[walInfoOffset:])
	if info&walLongHeader == 0 || !bytes.Equal(head[walSysidOffset:], old) {
		return fmt.Errorf("%s: no long page header with the system identifier of pg_control", seg)
	}
	binary.LittleEndian.PutUint64(head[walSysidOffset:], id)
	if _, err := f.WriteAt(head[walSysidOffset:], walSysidOffset); err != nil {
		return err
	}
	return f.Close()
}
