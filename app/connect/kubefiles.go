package connect

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"

	"github.com/snip/snip-jobs/configs"
)

// kubeconfigFile is a file a kubeconfig's context names, and the field of
// the kubeconfig its content goes to (nil: the token file, read by
// bearerFile).
type kubeconfigFile struct {
	configs.NamedFile
	data *[]byte
}

// kubeconfigFiles are the files the chosen context of raw names (k.Context,
// else its current one; kubeconfigTransport found it): its cluster's
// certificate-authority, its user's client-certificate, client-key and
// tokenFile, a relative path from the kubeconfig's folder, as kubectl reads
// them. A file whose data the kubeconfig also holds is not read (client-go
// would use the data); a token file wins over a token written in it. The paths are cleared from raw, so that client-go
// reads none of them itself.
func kubeconfigFiles(raw *api.Config, k configs.Kubernetes) []kubeconfigFile {
	_, c, err := chosenContext(raw, k.Context)
	if err != nil {
		return nil
	}
	var out []kubeconfigFile
	add := func(path *string, data *[]byte, what string, holds configs.FileKind) {
		if *path != "" && (data == nil || len(*data) == 0) {
			p := *path
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(k.Kubeconfig), p)
			}
			out = append(out, kubeconfigFile{configs.NamedFile{Key: what, Path: p, Holds: holds}, data})
		}
		*path = ""
	}
	if cl := raw.Clusters[c.Cluster]; cl != nil {
		add(&cl.CertificateAuthority, &cl.CertificateAuthorityData, fmt.Sprintf("certificate-authority of cluster %q", c.Cluster), configs.Certificates)
	}
	if u := raw.AuthInfos[c.AuthInfo]; u != nil {
		if u.TokenFile != "" {
			u.Token = "" // the file is what rotates: it wins
		}
		add(&u.ClientCertificate, &u.ClientCertificateData, fmt.Sprintf("client-certificate of user %q", c.AuthInfo), configs.Certificates)
		add(&u.ClientKey, &u.ClientKeyData, fmt.Sprintf("client-key of user %q", c.AuthInfo), configs.Secret)
		add(&u.TokenFile, nil, fmt.Sprintf("tokenFile of user %q", c.AuthInfo), configs.Secret)
	}
	return out
}

// readKubeconfigFiles reads the files kubeconfigFiles lists into raw, and
// returns its token file, if any, for bearerFile. The client certificate
// and key are read once: a client of a kubeconfig picks up new ones at its
// next start.
func readKubeconfigFiles(raw *api.Config, k configs.Kubernetes) (token *configs.NamedFile, err error) {
	for _, f := range kubeconfigFiles(raw, k) {
		if f.data == nil {
			if _, err := (fileToken{f.NamedFile}).Token(); err != nil {
				return nil, err
			}
			token = &f.NamedFile
			continue
		}
		if *f.data, err = configs.ReadFile(f.NamedFile); err != nil {
			return nil, err
		}
	}
	return token, nil
}

// examineKubeconfigFiles refuses what ReadFile would refuse of the files
// kubeconfigFiles lists, without reading them: validate's check. A file
// that is not here is not a problem (it may be where run runs).
func examineKubeconfigFiles(raw *api.Config, k configs.Kubernetes) error {
	var errs []error
	for _, f := range kubeconfigFiles(raw, k) {
		if p := configs.Examine(f.NamedFile); p.Kind != 0 && !p.OnlyReadable() {
			errs = append(errs, errors.New(p.String()))
		}
	}
	return errors.Join(errs...)
}

// tokenPeriod is how often a token file is read again: client-go's own
// period for one, half the time between a kubelet's refresh of a projected
// service account token and its expiry.
const tokenPeriod = time.Minute

// bearerFile is a rest.Config's WrapTransport that sends the token in file
// as the bearer token, read through configs.ReadFile at most every
// tokenPeriod (and again after a 401), as client-go does for a token file,
// which it would read with no bound.
func bearerFile(file configs.NamedFile) func(http.RoundTripper) http.RoundTripper {
	return transport.ResettableTokenSourceWrapTransport(transport.NewCachedTokenSource(fileToken{file}))
}

// fileToken reads a bearer token from a file, trimmed of white space.
type fileToken struct{ file configs.NamedFile }

func (t fileToken) Token() (*oauth2.Token, error) {
	b, err := configs.ReadFile(t.file)
	if err != nil {
		return nil, err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("%s %s: empty", t.file.Key, t.file.Path)
	}
	return &oauth2.Token{AccessToken: tok, TokenType: "Bearer", Expiry: time.Now().Add(tokenPeriod)}, nil
}
