package etcdtlstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Auth names the etcd users of a deployment and their passwords.
type Auth struct {
	// RootPassword is the password of etcd's root user (the administrator).
	RootPassword string
	// User is snip-jobs' user, Password its password. Role is its role, which
	// has readwrite on KeyRange(Prefix) and nothing else.
	User, Password, Role string
	// Prefix is snip-jobs' etcd.prefix.
	Prefix string
}

// NewAuth returns users named as docs/operations.md names them, with random
// passwords.
func NewAuth(prefix string) Auth {
	return Auth{RootPassword: password(), User: "snip-jobs", Password: password(), Role: "snip-jobs", Prefix: prefix}
}

func password() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// KeyRange is the keys snip-jobs writes under prefix: every key starts with
// prefix + "/" (leaders/, instances/, resign/). The trailing slash keeps a
// sibling deployment's "/snip-jobs-staging/" out of the grant.
func KeyRange(prefix string) string {
	return strings.TrimSuffix(prefix, "/") + "/"
}

// Grant creates the users and the role and enables authentication, through
// cli (which must reach the cluster with auth still disabled). Each step is
// the client API equivalent of one etcdctl command of docs/operations.md,
// in the same order:
//
//	etcdctl user add root
//	etcdctl user grant-role root root
//	etcdctl role add snip-jobs
//	etcdctl role grant-permission snip-jobs --prefix=true readwrite /snip-jobs/
//	etcdctl user add snip-jobs
//	etcdctl user grant-role snip-jobs snip-jobs
//	etcdctl auth enable
func Grant(ctx context.Context, cli *clientv3.Client, a Auth) error {
	keys := KeyRange(a.Prefix)
	steps := []struct {
		what string
		do   func() error
	}{
		{"user add root", func() error { _, err := cli.UserAdd(ctx, "root", a.RootPassword); return err }},
		{"user grant-role root root", func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err }},
		{"role add " + a.Role, func() error { _, err := cli.RoleAdd(ctx, a.Role); return err }},
		{"role grant-permission " + a.Role + " --prefix=true readwrite " + keys, func() error {
			_, err := cli.RoleGrantPermission(ctx, a.Role, keys, clientv3.GetPrefixRangeEnd(keys), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"user add " + a.User, func() error { _, err := cli.UserAdd(ctx, a.User, a.Password); return err }},
		{"user grant-role " + a.User + " " + a.Role, func() error { _, err := cli.UserGrantRole(ctx, a.User, a.Role); return err }},
		{"auth enable", func() error { _, err := cli.AuthEnable(ctx); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("etcdctl %s: %w", s.what, err)
		}
	}
	return nil
}

// AddCertUser creates user without a password, so that only a client
// certificate naming it (PKI.CertUser) logs it in, and grants it roles,
// through cli (root's): the client API equivalent of
//
//	etcdctl user add USER --no-password
//	etcdctl user grant-role USER ROLE
func AddCertUser(ctx context.Context, cli *clientv3.Client, user string, roles ...string) error {
	if _, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
		return fmt.Errorf("etcdctl user add %s --no-password: %w", user, err)
	}
	for _, r := range roles {
		if _, err := cli.UserGrantRole(ctx, user, r); err != nil {
			return fmt.Errorf("etcdctl user grant-role %s %s: %w", user, r, err)
		}
	}
	return nil
}
