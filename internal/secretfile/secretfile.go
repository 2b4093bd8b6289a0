// Package secretfile reads a file that holds a secret without letting the
// file decide how the read goes: a named pipe or a device is never opened (it
// could block the reader or feed it without end), and no more than the limit
// is read, whatever the file's size says. What a caller refuses beyond that
// (modes) it says in a check run on the file's information before the open
// and again on the open file, so a file swapped in between is judged too.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrTooLarge is Read's error for a file holding more than the limit.
var ErrTooLarge = errors.New("larger than a secret file may be")

// Read reads path through a limit of max bytes after check accepted what
// os.Stat says of it and of the open file. check must refuse what is not a
// regular file (Safe does, and more).
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
		return nil, fmt.Errorf("%s: %w (at most %d bytes)", path, ErrTooLarge, max)
	}
	return data, nil
}

// Safe refuses a file that is not a regular file or that its group or others
// may write (anyone could have replaced what it holds).
func Safe(info fs.FileInfo) error {
	switch {
	case !info.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (mode %v): a secret file must be one", info.Name(), info.Mode())
	case info.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by its group or others (mode %04o): chmod go-w it and check what it holds", info.Name(), info.Mode().Perm())
	}
	return nil
}
