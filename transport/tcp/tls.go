package tcp

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"

	"github.com/goccl/goccl/internal/auth"
	"github.com/goccl/goccl/internal/config"
)

// JobTLS returns the TLS configurations of a job's links made from its token
// (GOCCL_TLS=1 with GOCCL_JOB_TOKEN): every rank derives the same Ed25519 key
// from the token (HMAC-SHA256 of the token under a fixed label, used as the
// key's seed), presents a self-signed certificate for it, and accepts a peer
// only if the peer's certificate is for that same public key, in both
// directions (the server requires a client certificate). TLS 1.3 only, so
// the session keys are ephemeral (ECDHE) and the token never crosses the
// wire. Peers are dialed by address, so no host name is checked.
func JobTLS(token []byte) (server, client *tls.Config, err error) {
	if len(token) == 0 {
		return nil, nil, errors.New("tcp: TLS from the job token needs a token (" + config.JobToken.Name + ")")
	}
	seed := auth.MAC(token, "goccl tls key v1")
	key := ed25519.NewKeyFromSeed(seed[:])
	pub := key.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "goccl job"},
		NotBefore:    time.Unix(0, 0),
		NotAfter:     time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, nil, fmt.Errorf("tcp: job certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the peer presented no certificate")
		}
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("the peer's certificate: %w", err)
		}
		if k, ok := c.PublicKey.(ed25519.PublicKey); !ok || !bytes.Equal(k, pub) {
			return errors.New("the peer's certificate is not this job's (another " + config.JobToken.Name + ")")
		}
		return nil
	}
	return tlsConfigs(cert, verify)
}

// FileTLS returns TLS configurations from PEM files (GOCCL_TLS_CERT,
// GOCCL_TLS_KEY, GOCCL_TLS_CA): each rank presents certFile/keyFile and
// accepts a peer whose certificate chains to a certificate in caFile, in
// both directions. Peers are dialed by address, so no host name is checked.
func FileTLS(certFile, keyFile, caFile string) (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tcp: TLS certificate: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tcp: TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("tcp: TLS CA: no PEM certificate in %s", caFile)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("the peer presented no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("the peer's certificate: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
	return tlsConfigs(cert, verify)
}

func tlsConfigs(cert tls.Certificate, verify func([][]byte, [][]*x509.Certificate) error) (server, client *tls.Config, err error) {
	server = &tls.Config{
		MinVersion:            tls.VersionTLS13,
		Certificates:          []tls.Certificate{cert},
		ClientAuth:            tls.RequireAnyClientCert,
		VerifyPeerCertificate: verify,
	}
	client = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// The chain is checked by verify (by key or by CA), without the
		// host name check that peers dialed by IP address would fail.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: verify,
	}
	return server, client, nil
}
