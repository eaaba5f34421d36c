package remotedocker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// The address published ports are dialled at: the config's
// docker_remote_host, else OpenSage's DOCKER_REMOTE_HOST, else
// docker_host's host.
func TestRemoteHostFromEnvironment(t *testing.T) {
	t.Setenv("DOCKER_CERT_PATH", "")
	t.Setenv(EnvTLSCertDir, "")
	tests := []struct{ file, env, want string }{
		{"gpu.example", "env.example", "gpu.example"},
		{"", "env.example", "env.example"},
		{"", "", "10.1.2.3"},
	}
	for _, tt := range tests {
		t.Setenv(EnvRemoteHost, tt.env)
		b, err := New(Config{Host: "tcp://10.1.2.3:2375", RemoteHost: tt.file})
		require.NoError(t, err)
		assert.Equal(t, tt.want, b.RemoteHost(), "file %q, %s=%q", tt.file, EnvRemoteHost, tt.env)
		require.NoError(t, b.Close())
	}
}

// DOCKER_TLS_CERTDIR (OpenSage) makes a tcp:// engine be spoken to over TLS
// with its cert.pem and key.pem, verifying the engine against its ca.pem,
// on both the backend's own client and the native one it drives. The
// engine is an in-process TLS stand-in answering the two calls made (no
// Docker daemon with TLS runs on this machine).
func TestTLSCertDirFakeEngine(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCA(t)
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw)
	clientCert, clientKey := newLeaf(t, ca, caKey, "sbx-test-client", x509.ExtKeyUsageClientAuth)
	writePEM(t, filepath.Join(dir, "cert.pem"), "CERTIFICATE", clientCert.Raw)
	der, err := x509.MarshalECPrivateKey(clientKey)
	require.NoError(t, err)
	writePEM(t, filepath.Join(dir, "key.pem"), "EC PRIVATE KEY", der)
	serverCert, serverKey := newLeaf(t, ca, caKey, "engine", x509.ExtKeyUsageServerAuth)

	var mu sync.Mutex
	seen := map[string]string{} // path -> client certificate CN
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.TLS.PeerCertificates[0].Subject.CommonName
		mu.Unlock()
		w.Header().Set("Api-Version", "1.43")
		switch {
		case strings.HasSuffix(r.URL.Path, "/_ping"):
			w.Write([]byte("OK"))
		case strings.HasSuffix(r.URL.Path, "/containers/json"):
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte("[]"))
		case strings.HasSuffix(r.URL.Path, "/volumes"):
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"Volumes": []}`))
		default:
			http.NotFound(w, r)
		}
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{serverCert.Raw}, PrivateKey: serverKey}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	srv.StartTLS()
	defer srv.Close()

	t.Setenv("DOCKER_CERT_PATH", "")
	t.Setenv(EnvTLSCertDir, dir)
	b, err := New(Config{Host: "tcp://" + srv.Listener.Addr().String()})
	require.NoError(t, err)
	defer b.Close()
	_, err = b.cli.Ping(t.Context())
	require.NoError(t, err, "the backend's client")
	_, err = b.List(t.Context(), backend.Filter{})
	require.NoError(t, err, "the native client it drives: %v", seen)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "sbx-test-client", seen["/_ping"])
	assert.Equal(t, "sbx-test-client", seen["/v1.43/containers/json"], "%v", seen)
	assert.Equal(t, "sbx-test-client", seen["/v1.43/volumes"], "%v", seen)

	// A folder without the three files is refused, naming the variable.
	require.NoError(t, os.Remove(filepath.Join(dir, "key.pem")))
	_, err = New(Config{Host: "tcp://" + srv.Listener.Addr().String()})
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, EnvTLSCertDir+"="+dir+": want ca.pem, cert.pem and key.pem in it")
	// ssh:// engines do not read it (OpenSage reads it for tcp:// only).
	_, err = New(Config{Host: "ssh://me@gpu.example", SSHConfig: "none"})
	require.NoError(t, err)
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sbx-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func newLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}
