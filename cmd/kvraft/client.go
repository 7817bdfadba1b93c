package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// clientFlags are the flags of the client commands (status, snapshot): how
// to reach the nodes' HTTP API, over TLS or not, and with which
// credentials.
type clientFlags struct {
	caFile, certFile, keyFile, tokenFile string
	timeout                              time.Duration
}

// addClientFlags defines the client commands' common flags in fs.
func addClientFlags(fs *flag.FlagSet) *clientFlags {
	c := new(clientFlags)
	fs.StringVar(&c.caFile, "cacert", "", "CA certificate (PEM) to verify the nodes' certificates with: use HTTPS")
	fs.StringVar(&c.certFile, "cert", "", "client certificate (PEM) to present (with --key)")
	fs.StringVar(&c.keyFile, "key", "", "the client certificate's private key (PEM)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding a bearer token to send (writes and admin calls need it, or a client certificate, on a node with TLS)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long one request may take")
	return c
}

// apiClient reaches nodes' HTTP API: over HTTPS if a CA was given, with a
// client certificate and a bearer token if given.
type apiClient struct {
	hc     *http.Client
	scheme string
	token  string
}

func (c *clientFlags) client() (*apiClient, error) {
	if (c.certFile == "") != (c.keyFile == "") {
		return nil, errors.New("--cert and --key go together")
	}
	if c.timeout <= 0 {
		return nil, errors.New("--timeout must be positive")
	}
	tr := &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	ac := &apiClient{hc: &http.Client{Transport: tr, Timeout: c.timeout}, scheme: "http"}
	if c.caFile != "" || c.certFile != "" {
		cfg, err := tlsClientConfig(c.caFile, c.certFile, c.keyFile)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
		ac.scheme = "https"
	}
	if c.tokenFile != "" {
		tok, err := readToken(c.tokenFile)
		if err != nil {
			return nil, err
		}
		ac.token = tok
	}
	return ac, nil
}

// url returns the URL of path on the node at addr.
func (ac *apiClient) url(addr, path string) string { return ac.scheme + "://" + addr + path }

// do sends req with the client's credentials.
func (ac *apiClient) do(req *http.Request) (*http.Response, error) {
	if ac.token != "" {
		req.Header.Set("Authorization", "Bearer "+ac.token)
	}
	return ac.hc.Do(req)
}

// tlsClientConfig is a TLS client configuration that trusts the CA in
// caFile (the system's roots if empty) and presents the certificate in
// certFile and keyFile (none if empty).
func tlsClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadCertPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("certificate %s: %w", certFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// loadCertPool reads the PEM certificates of files into a pool.
func loadCertPool(files ...string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("%s: no PEM certificate", file)
		}
	}
	return pool, nil
}

// readToken reads a bearer token: the file's first line, which must not
// be empty.
func readToken(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("%s: empty token", file)
	}
	return tok, nil
}
