package debpkg

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// licenceFile names the files a module's licence and notices are in.
var licenceFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice)([.-].*)?$`)

// apacheText is the Apache License 2.0's full text, with its appendix when
// present: Debian refers to /usr/share/common-licenses instead of copying it.
var apacheText = regexp.MustCompile(`(?s)Apache License\s+Version 2\.0, January 2004.*?END OF TERMS AND CONDITIONS(\s*APPENDIX: How to apply.*?limitations under the License\.)?`)

const apacheRef = "[The Apache License, Version 2.0: /usr/share/common-licenses/Apache-2.0 on Debian]"

// copyright is /usr/share/doc/snip-jobs/copyright: the licence files of the
// source tree (or that it has none), the Go toolchain's, and for every module
// the binary links (its build information) that module's licence and notice
// files as its version in the module cache holds them. source is the
// snip-jobs module's folder, where the go command runs.
func copyright(ctx context.Context, source, binary string) ([]byte, error) {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("the binary's modules: %w", err)
	}
	mods, err := moduleDirs(ctx, source, bi)
	if err != nil {
		return nil, err
	}
	goroot, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOROOT: %w", err)
	}
	var b bytes.Buffer
	b.WriteString(`snip-jobs, from https://github.com/snip/snip-jobs

/usr/bin/snip-jobs is a statically linked Go program: snip-jobs's own code,
the Go standard library and runtime, and the Go modules listed below, each
followed by its licence and notice files. Texts of the Apache License,
Version 2.0 are replaced by a reference to Debian's copy.
`)
	own := module{Path: "github.com/snip/snip-jobs", Dir: source}
	if names, err := licenceFiles(source); err != nil {
		return nil, err
	} else if len(names) == 0 {
		fmt.Fprintf(&b, "\n%s\n%s\n\nIts repository states no licence for its own code.\n", strings.Repeat("-", 79), own.Path)
	} else {
		mods = append([]module{own}, mods...)
	}
	mods = append([]module{{Path: "Go", Version: bi.GoVersion, Dir: strings.TrimSpace(string(goroot))}}, mods...)
	for _, m := range mods {
		fmt.Fprintf(&b, "\n%s\n%s\n", strings.Repeat("-", 79), strings.TrimSpace(m.Path+" "+m.Version))
		names, err := licenceFiles(m.Dir)
		if err != nil {
			return nil, err
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("module %s %s has no licence file in %s", m.Path, m.Version, m.Dir)
		}
		for _, name := range names {
			text, err := os.ReadFile(filepath.Join(m.Dir, name))
			if err != nil {
				return nil, err
			}
			text = apacheText.ReplaceAll(text, []byte(apacheRef))
			fmt.Fprintf(&b, "\n%s:\n\n%s\n", name, bytes.TrimSpace(text))
		}
	}
	return b.Bytes(), nil
}

type module struct{ Path, Version, Dir, Error string }

// moduleDirs finds the linked modules (their replacements where replaced) in
// the module cache, downloading any that is not there: go mod download.
func moduleDirs(ctx context.Context, dir string, bi *buildinfo.BuildInfo) ([]module, error) {
	var args []string
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		if d.Version == "" {
			return nil, fmt.Errorf("module %s is replaced by a folder: no version to find its licence by", d.Path)
		}
		args = append(args, d.Path+"@"+d.Version)
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"mod", "download", "-json"}, args...)...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download: %w\n%s", err, stderr.String())
	}
	var mods []module
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var m module
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go mod download -json: %w", err)
		}
		if m.Error != "" || m.Dir == "" {
			return nil, fmt.Errorf("module %s %s: %s", m.Path, m.Version, m.Error)
		}
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	return mods, nil
}

func licenceFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && licenceFile.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
