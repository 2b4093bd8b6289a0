package keyring

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/snip/snip-jobs/internal/boundedfile"
)

// Source says where a job's keys come from: the key_file and key_env options
// of the renewer and of every reader of its tables (exactly one is set).
type Source struct {
	File string // a file holding the keys, one base64 line each
	Env  string // or the name of an environment variable holding them
}

// Check reports a source that names neither or both, as a config error.
func (s Source) Check() error {
	switch {
	case s.File == "" && s.Env == "":
		return errors.New("key_file or key_env is required: the key that encrypts private keys at rest")
	case s.File != "" && s.Env != "":
		return errors.New("set key_file or key_env, not both")
	}
	return nil
}

// maxKeyFile bounds what Load reads of key_file: a few keys of 32 bytes in
// base64, one a line.
const maxKeyFile = 64 << 10

// Load reads and parses the keys. Errors name the file or the variable,
// never the value.
func (s Source) Load() (*Keyring, error) {
	data, where, err := s.Text()
	if err != nil {
		return nil, err
	}
	k, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return k, nil
}

// Text is what the source holds, unparsed, and where that is for messages
// ("key_file /etc/…", "key_env NAME"): key_file read through the bounded
// reader (a regular file no one else may write, at most 64 KiB), or
// key_env's value.
func (s Source) Text() (data []byte, where string, err error) {
	if err := s.Check(); err != nil {
		return nil, "", err
	}
	if s.Env != "" {
		v, ok := os.LookupEnv(s.Env)
		if !ok {
			return nil, "", fmt.Errorf("environment variable %s (key_env) is not set", s.Env)
		}
		return []byte(v), "key_env " + s.Env, nil
	}
	b, err := boundedfile.Read(s.File, maxKeyFile, boundedfile.Safe)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, "", fmt.Errorf("cannot read key_file %s: %w", s.File, err)
	}
	return b, "key_file " + s.File, nil
}
