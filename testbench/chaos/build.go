package chaos

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/snip/snip-jobs/testbench/gobuild"
)

// BuildEtcd returns an etcd server binary of version ("3.5.23"), built with
// `go build go.etcd.io/etcd/server/v3` at that version in a throwaway module
// (the module proxy or the module cache supplies the source) into
// <user cache>/snip-jobs/etcd-<version>/etcd, or that file when an earlier
// run built it. The server module's main package is etcd's own main.
func BuildEtcd(ctx context.Context, version string) (string, error) {
	cache, err := gobuild.CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "etcd-"+version, "etcd")
	check := gobuild.VersionSays("etcd Version: " + version)
	if gobuild.Cached(ctx, bin, check) {
		return bin, nil
	}
	mod := fmt.Sprintf("module etcdbuild\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n", version)
	return bin, gobuild.Build{
		Bin: bin, Files: map[string]string{"go.mod": mod},
		Steps: [][]string{{"build", "-o", "OUT", "go.etcd.io/etcd/server/v3"}},
		Check: check, Timeout: buildTimeout,
	}.Run(ctx)
}
