package acmeflow

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-acme/lego/v5/lego"
	"github.com/go-acme/lego/v5/registration"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/snip/snip-jobs/jobs/certrenew/keyring"
	"github.com/snip/snip-jobs/scheduler"
)

// accountStore is the one ACME account every instance shares, kept in
// certrenew_account with its key sealed. It guarantees that the key is
// stored (fenced) before anything is sent to the CA with it, so every
// instance and term uses the same key, and that the row follows what the CA
// was told (the account's URL, its contact).
type accountStore struct {
	pool     *pgxpool.Pool
	keys     *keyring.Keyring
	r        *scheduler.Run
	log      *slog.Logger
	dir      string // the CA's directory URL: the row's key
	email    string
	throttle *caThrottle // a refusal from the CA may pause the renewer
}

// load returns the shared ACME account, creating its key first if there
// is none: the key is stored (fenced) before anything is sent to the CA.
func (a *accountStore) load(ctx context.Context) (*acmeUser, error) {
	u, ok, err := a.read(ctx)
	if err != nil || ok {
		return u, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pemKey, err := keyring.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	err = a.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO certrenew_account (directory, email, key_sealed, key_id, token)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (directory) DO NOTHING`,
			a.dir, a.email, a.keys.Seal(pemKey, keyring.AccountAAD(a.dir)), a.keys.KeyID(), a.r.Token)
		return err
	})
	if err != nil {
		return nil, err
	}
	a.log.InfoContext(ctx, "created the ACME account key", "directory", a.dir)
	u, ok, err = a.read(ctx)
	if err == nil && !ok {
		err = errors.New("account row vanished")
	}
	return u, err
}

// read reads the account's row and opens its key; false: there is none.
func (a *accountStore) read(ctx context.Context) (*acmeUser, bool, error) {
	var email string
	var sealed []byte
	var url *string
	err := a.pool.QueryRow(ctx, `SELECT email, key_sealed, account_url FROM certrenew_account WHERE directory = $1`, a.dir).
		Scan(&email, &sealed, &url)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	pt, err := a.keys.Open(sealed, keyring.AccountAAD(a.dir))
	if err != nil {
		return nil, false, fmt.Errorf("account key: %w", err)
	}
	key, err := keyring.ParseKeyPEM(pt)
	if err != nil {
		return nil, false, fmt.Errorf("account key: %w", err)
	}
	u := &acmeUser{email: email, key: key}
	if url != nil {
		u.url = *url
	}
	return u, true, nil
}

// register registers the account if it has no URL yet (newAccount with a
// known key returns the existing account: registering twice is harmless),
// and updates its contact when the configured e-mail changed.
func (a *accountStore) register(ctx context.Context, client *lego.Client, u *acmeUser) error {
	dir := a.dir
	switch {
	case u.url == "":
		acct, err := client.Registration.Register(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true})
		if err != nil {
			a.throttle.failed(ctx, classify(err, &observation{}), "")
			return fmt.Errorf("register at %s: %w", dir, err)
		}
		u.url, u.email = acct.Location, a.email
		err = a.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE certrenew_account SET account_url = $2, email = $3, registered_at = now(), token = $4
				WHERE directory = $1`, dir, u.url, u.email, a.r.Token)
			return err
		})
		if err != nil {
			return err
		}
		a.log.InfoContext(ctx, "registered the ACME account", "directory", dir, "account", u.url)
	case u.email != a.email:
		u.email = a.email
		if _, err := client.Registration.UpdateRegistration(ctx, registration.RegisterOptions{TermsOfServiceAgreed: true}); err != nil {
			a.throttle.failed(ctx, classify(err, &observation{}), "")
			return fmt.Errorf("update the account's contact at %s: %w", dir, err)
		}
		err := a.r.Fenced(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE certrenew_account SET email = $2, token = $3 WHERE directory = $1`, dir, u.email, a.r.Token)
			return err
		})
		if err != nil {
			return err
		}
		a.log.InfoContext(ctx, "updated the ACME account's contact", "directory", dir, "account", u.url)
	}
	return nil
}
