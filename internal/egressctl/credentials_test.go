package egressctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/egress"
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
