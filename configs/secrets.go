package configs

import (
	"fmt"
	"os"
	"strings"
)

// DatabaseURL reads the PostgreSQL URL from postgres.url_env or postgres.url_file,
// trimmed of surrounding white space. Errors name the variable or file, never the
// value.
func (f *File) DatabaseURL() (string, error) {
	return readSecret("postgres.url_file", f.Postgres.URLFile, "postgres.url_env", f.Postgres.URLEnv)
}

// EtcdPassword reads the etcd password from etcd.auth.password_file or
// etcd.auth.password_env, trimmed like DatabaseURL. It returns "" and no error when
// etcd.auth is not configured.
func (f *File) EtcdPassword() (string, error) {
	if f.Etcd.Auth.User == "" {
		return "", nil
	}
	return readSecret("etcd.auth.password_file", f.Etcd.Auth.PasswordFile, "etcd.auth.password_env", f.Etcd.Auth.PasswordEnv)
}

func readSecret(fileKey, file, envKey, env string) (string, error) {
	switch {
	case file != "":
		data, err := ReadFile(NamedFile{Key: fileKey, Path: file})
		if err != nil {
			return "", err
		}
		s := strings.TrimSpace(string(data))
		if s == "" {
			return "", fmt.Errorf("%s %s is empty", fileKey, file)
		}
		return s, nil
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("environment variable %s (%s) is not set", env, envKey)
		}
		s := strings.TrimSpace(v)
		if s == "" {
			return "", fmt.Errorf("environment variable %s (%s) is empty", env, envKey)
		}
		return s, nil
	}
	return "", fmt.Errorf("neither %s nor %s is set", fileKey, envKey)
}
