package main

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/kvbuf/kvbuf/raftkv"
)

// security is a node's TLS and authentication setup.
//
// With --tls-cert and --tls-key the node serves HTTPS on its address, for
// peers and clients alike, presenting that certificate. --peer-ca (then
// required) is the cluster's CA: the transport (/raft/) takes only requests
// whose client certificate it signed, and the node verifies its peers'
// certificates with it (mutual TLS; each node's certificate must allow
// both server and client authentication, and name the host of its address).
//
// Writes and admin calls (PUT and DELETE of keys, keyspaces, bitslices and
// bits, the member API, GET /snapshot) need a bearer token (--token-file:
// "Authorization: Bearer TOKEN"), or a client certificate signed by
// --client-ca (or by --peer-ca: followers forward writes with theirs). With
// TLS, one of --token-file and --client-ca is required. Reads, /status,
// /health and /metrics need no credentials.
//
// Without TLS the node serves plain HTTP, and only on a loopback address
// unless --insecure says otherwise: anyone who reaches it can then write
// (unless --token-file, whose token then travels in the clear).
type security struct {
	certFile, keyFile, peerCAFile, clientCAFile, tokenFile string
	insecure                                               bool

	auth *authorizer // built by load
}

func (s *security) add(fs *flag.FlagSet) {
	fs.StringVar(&s.certFile, "tls-cert", "", "this node's certificate (PEM): serve HTTPS, and present it to peers (server and client authentication)")
	fs.StringVar(&s.keyFile, "tls-key", "", "the private key (PEM) of --tls-cert")
	fs.StringVar(&s.peerCAFile, "peer-ca", "", "the cluster's CA certificate (PEM): peers must present a certificate it signed (required with --tls-cert)")
	fs.StringVar(&s.clientCAFile, "client-ca", "", "CA certificate (PEM) of the client certificates allowed to write and administer")
	fs.StringVar(&s.tokenFile, "token-file", "", "file whose first line is a bearer token allowed to write and administer")
	fs.BoolVar(&s.insecure, "insecure", false, "serve plain HTTP on a non-loopback address (anyone who reaches it can read, and write unless --token-file)")
}

// check refuses a setup that leaves the node open where it must not be.
func (s *security) check(listen string) error {
	tlsOn := s.certFile != "" || s.keyFile != ""
	switch {
	case (s.certFile == "") != (s.keyFile == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case tlsOn && s.peerCAFile == "":
		return errors.New("--tls-cert needs --peer-ca (the cluster's CA: peers authenticate each other)")
	case tlsOn && s.clientCAFile == "" && s.tokenFile == "":
		return errors.New("with TLS, writes and admin calls need credentials: give --client-ca or --token-file")
	case !tlsOn && (s.peerCAFile != "" || s.clientCAFile != ""):
		return errors.New("--peer-ca and --client-ca need --tls-cert and --tls-key")
	case !tlsOn && !s.insecure && !loopback(listen):
		return fmt.Errorf("refusing to serve plain HTTP on %s, a non-loopback address: give --tls-cert, --tls-key and --peer-ca (or --insecure on a trusted network)", listen)
	}
	return nil
}

// loopback reports whether addr ("host:port") listens on loopback only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// load reads the certificates and token, sets opts.PeerTLS, and returns the
// server's TLS configuration (nil: plain HTTP).
func (s *security) load(opts *raftkv.Options) (*tls.Config, error) {
	s.auth = &authorizer{}
	if s.tokenFile != "" {
		tok, err := readToken(s.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		s.auth.token = []byte(tok)
	}
	if s.certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert: %w", err)
	}
	peerCAs, err := loadCertPool(s.peerCAFile)
	if err != nil {
		return nil, fmt.Errorf("--peer-ca: %w", err)
	}
	s.auth.peerCAs = peerCAs
	clientCAs := peerCAs
	if s.clientCAFile != "" {
		if s.auth.clientCAs, err = loadCertPool(s.clientCAFile); err != nil {
			return nil, fmt.Errorf("--client-ca: %w", err)
		}
		// The server asks for a client certificate of either CA.
		if clientCAs, err = loadCertPool(s.peerCAFile, s.clientCAFile); err != nil {
			return nil, err
		}
	}
	opts.PeerTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: peerCAs}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    clientCAs,
	}, nil
}

// authorizer decides who may write and administer.
type authorizer struct {
	token              []byte         // nil: no token
	peerCAs, clientCAs *x509.CertPool // nil: no such certificates
}

// open reports whether anyone may write: no credentials were configured.
func (a *authorizer) open() bool {
	return a.token == nil && a.peerCAs == nil && a.clientCAs == nil
}

// check returns nil if r carries credentials allowed to write and
// administer, else the reason.
func (a *authorizer) check(r *http.Request) error {
	if a.open() {
		return nil
	}
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if ok && a.token != nil && subtle.ConstantTimeCompare([]byte(tok), a.token) == 1 {
			return nil
		}
		return errors.New("the bearer token is not this node's")
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		for _, pool := range []*x509.CertPool{a.clientCAs, a.peerCAs} {
			if pool != nil && raftkv.VerifyPeerCert(r.TLS.PeerCertificates, pool) == nil {
				return nil
			}
		}
		return errors.New("the client certificate is not signed by --client-ca or --peer-ca")
	}
	return errors.New("writes and admin calls need a bearer token (Authorization: Bearer ...) or a client certificate")
}
