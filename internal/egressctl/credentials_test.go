package egressctl

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/errdefs"
)

// The file a backend writes is read back into the same CA and
// credentials, is its owner's alone, and a bad declaration in it is
// refused naming the credential.
func TestCredentialsFile(t *testing.T) {
	ca, err := egress.NewCA("sb")
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "credentials.json")
	spec := Credentials{CACert: string(ca.CertPEM()), CAKey: string(key), Credentials: []CredentialSpec{
		{Name: "openai", Hosts: []string{"api.openai.com:443"}, Header: "Authorization", Format: "Bearer {value}", Placeholder: "ph", Value: "sk-real"},
	}}
	if err := WriteCredentials(file, spec); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	gotCA, creds, err := loadCredentials(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(gotCA.CertPEM()) != string(ca.CertPEM()) || len(creds) != 1 || creds[0].Name != "openai" || creds[0].Header != "Authorization" {
		t.Fatalf("read back %+v", creds)
	}
	b, err := egress.NewBroker(gotCA, creds, egress.BrokerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Wants("api.openai.com", 443) || b.Wants("api.openai.com", 80) {
		t.Error("the hosts did not survive the file")
	}

	for _, c := range []struct {
		edit func(*Credentials)
		want string
	}{
		{func(c *Credentials) { c.Credentials[0].Header = "Bad Header" }, "credential openai: header"},
		{func(c *Credentials) { c.Credentials[0].Hosts = []string{"*bad"} }, "credential openai"},
		{func(c *Credentials) { c.CAKey = "not pem" }, "PEM"},
	} {
		bad := spec
		bad.Credentials = append([]CredentialSpec(nil), spec.Credentials...)
		c.edit(&bad)
		if err := WriteCredentials(file, bad); err != nil {
			t.Fatal(err)
		}
		if _, _, err := loadCredentials(file); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
	}
	// Another CA's key does not go with this certificate.
	other, _ := egress.NewCA("other")
	otherKey, _ := other.KeyPEM()
	if _, err := egress.LoadCA(ca.CertPEM(), otherKey); err == nil {
		t.Error("LoadCA took a key that is not the certificate's")
	}
}

// A rotation over the control socket (for an enforcer that gave up root):
// refused by one started without credentials; a bad set is refused as bad
// configuration and the credentials in force stay; a good one is in force
// when SetCredentials returns.
func TestSetCredentialsOverControlSocket(t *testing.T) {
	pol, _ := egress.NewPolicy("deny", []string{"api.test"}, nil)
	e, err := egress.New(egress.Options{Policy: pol, Upstream: "127.0.0.1:53"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	s := &server{e: e}
	sock := filepath.Join(t.TempDir(), "control")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.handler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	ca, _ := egress.NewCA("sb")
	key, _ := ca.KeyPEM()
	c := Credentials{CACert: string(ca.CertPEM()), CAKey: string(key), Credentials: []CredentialSpec{
		{Name: "api", Hosts: []string{"api.test"}, Header: "X-Api-Key", Value: "v1"}}}
	if err := SetCredentials(t.Context(), sock, c); err == nil || !strings.Contains(err.Error(), "started without --credentials") {
		t.Fatalf("an enforcer without credentials took a rotation: %v", err)
	}
	s.credentials = "/the/file"
	if err := SetCredentials(t.Context(), sock, c); err != nil {
		t.Fatal(err)
	}
	bad := c
	bad.Credentials = []CredentialSpec{{Name: "api", Hosts: []string{"api.test"}, Header: "Bad Header", Value: "v2"}}
	if err := SetCredentials(t.Context(), sock, bad); !errors.Is(err, errdefs.ErrInvalidConfig) || !strings.Contains(err.Error(), "credential api: header") {
		t.Fatalf("a bad rotation: %v", err)
	}
}

// Records of requests that carried credentials are kept apart from
// refusals: a busy API user does not push the refusals out.
func TestLatestOfEachKind(t *testing.T) {
	var all []Denial
	for i := range 5 {
		all = append(all, Denial{Reason: fmt.Sprint("refused ", i)})
	}
	for i := range 20 {
		all = append(all, Denial{Kind: KindCredential, Reason: fmt.Sprint("brokered ", i)})
	}
	got := latestOfEachKind(all, 3)
	var reasons []string
	for _, d := range got {
		reasons = append(reasons, d.Reason)
	}
	if want := "refused 2,refused 3,refused 4,brokered 17,brokered 18,brokered 19"; strings.Join(reasons, ",") != want {
		t.Errorf("kept %q, want %q", strings.Join(reasons, ","), want)
	}
}
