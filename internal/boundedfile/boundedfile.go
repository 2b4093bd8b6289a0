// Package boundedfile is the one reader of the files a config names (secrets,
// CA bundles and certificates, kubeconfigs) and of the config file itself: it
// reads a file without letting the file decide how the read goes. A named
// pipe or a device is never opened (it could block the reader or feed it
// without end), and no more than the limit is read, whatever the file's size
// says. What a caller refuses beyond that it says in a check run on the
// file's information before the open and again on the open file, so a file
// swapped in between is judged too: Regular for files anyone may read, Safe
// for secrets (no one else may have written them).
//
// What it does not do: judge the content (a CA bundle that holds no
// certificate is its caller's business), or follow the file after the read.
package boundedfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrTooLarge is Read's error for a file holding more than the limit.
var ErrTooLarge = errors.New("larger than the file may be")

// Read reads path through a limit of max bytes after check accepted what
// os.Stat says of it and of the open file. check must refuse what is not a
// regular file (Regular and Safe do). With ErrTooLarge it returns the max+1
// bytes it read, for a caller that says where the file crosses the limit.
func Read(path string, max int64, check func(fs.FileInfo) error) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := check(info); err != nil {
		return nil, err
	}
	// O_NONBLOCK: should a named pipe take the file's place since Stat, open
	// does not wait for a writer; check of the open file then refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(info); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return data, fmt.Errorf("%s: %w (at most %d bytes)", path, ErrTooLarge, max)
	}
	return data, nil
}

// Regular refuses a file that is not a regular file: a named pipe, a device,
// a directory or a socket.
func Regular(info fs.FileInfo) error {
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (mode %v)", info.Name(), info.Mode())
	}
	return nil
}

// Safe refuses what Regular refuses, and a file its group or others may
// write (anyone could have replaced what it holds): the check of a secret.
func Safe(info fs.FileInfo) error {
	switch {
	case !info.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (mode %v): a secret file must be one", info.Name(), info.Mode())
	case info.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by its group or others (mode %04o): chmod go-w it and check what it holds", info.Name(), info.Mode().Perm())
	}
	return nil
}
