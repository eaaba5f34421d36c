package egressctl

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/atomicfile"
)

// Credentials is the file `sbxd egress --credentials FILE` reads (mode
// 0600, written by the backend outside the sandbox): the sandbox's
// certificate authority and the credentials its enforcer brokers (see
// egress.Broker). The enforcer reads it at start and again on SIGHUP (a
// rotation).
type Credentials struct {
	CACert      string           `json:"ca_cert"` // PEM
	CAKey       string           `json:"ca_key"`  // PEM; never in the sandbox
	Credentials []CredentialSpec `json:"credentials"`
}

// CredentialSpec is one brokered credential (egress.Credential).
type CredentialSpec struct {
	Name        string   `json:"name"`
	Hosts       []string `json:"hosts"`
	Header      string   `json:"header,omitempty"`
	Format      string   `json:"format,omitempty"`
	Query       string   `json:"query,omitempty"`
	BasicUser   string   `json:"basic_user,omitempty"`
	Placeholder string   `json:"placeholder,omitempty"`
	Value       string   `json:"value"`
}

// WriteCredentials writes c to file, readable by its owner alone.
func WriteCredentials(file string, c Credentials) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(file, data); err != nil {
		return err
	}
	return os.Chmod(file, 0o600)
}

// loadCredentials reads file into a CA and credentials.
func loadCredentials(file string) (*egress.CA, []*egress.Credential, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	var c Credentials
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	ca, creds, err := c.parse()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	return ca, creds, nil
}

// parse returns c's CA and credentials, checked.
func (c Credentials) parse() (*egress.CA, []*egress.Credential, error) {
	ca, err := egress.LoadCA([]byte(c.CACert), []byte(c.CAKey))
	if err != nil {
		return nil, nil, err
	}
	var creds []*egress.Credential
	for _, s := range c.Credentials {
		cred := &egress.Credential{Name: s.Name, Header: s.Header, Format: s.Format, Query: s.Query, BasicUser: s.BasicUser, Placeholder: s.Placeholder}
		for _, h := range s.Hosts {
			r, err := egress.ParseRule(h)
			if err != nil {
				return nil, nil, fmt.Errorf("credential %s: %w", s.Name, err)
			}
			cred.Hosts = append(cred.Hosts, r)
		}
		if err := cred.Check(); err != nil {
			return nil, nil, err
		}
		cred.SetValue(s.Value)
		creds = append(creds, cred)
	}
	return ca, creds, nil
}

// applyCredentials gives e the credentials of file.
func applyCredentials(e *egress.Enforcer, file string) error {
	ca, creds, err := loadCredentials(file)
	if err != nil {
		return err
	}
	return e.SetCredentials(ca, creds, nil)
}
