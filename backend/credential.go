package backend

import "context"

// Credential is a secret brokered at the egress boundary: the sandbox
// never holds it. The sandbox's enforcer ends its TLS to the credential's
// hosts with a certificate of a certificate authority made for the
// sandbox, and adds the value to each request there (replacing the
// placeholder the sandbox was given in Env, or adding the header). Only
// backends with Capabilities.Credentials take a Spec with credentials;
// the others refuse it.
type Credential struct {
	// Name is the credential's key in the config ("openai").
	Name string
	// Hosts are egress rules of the hosts that get it (names, wildcards,
	// ports; not addresses). The sandbox's egress policy must allow them.
	Hosts []string
	// Where the value goes: Header (Format, default "{value}", with
	// "{value}" replaced by it), Query (a query parameter) or BasicUser
	// (HTTP basic auth, the value as the password). Exactly one is set.
	Header, Format, Query, BasicUser string
	// Env, when set, is a variable the sandbox gets holding a placeholder
	// (random, per sandbox, meaningless outside it) for SDKs that insist
	// on one.
	Env string
	// From is where the value is read, outside the sandbox, when the
	// sandbox is created and when it is rotated.
	From CredentialSource
}

// CredentialSource is where a credential's value comes from: exactly one
// of an environment variable of the host process, a file, or the output
// of a command (trailing white space trimmed).
type CredentialSource struct {
	Env     string
	File    string
	Command []string
}

// CredentialRotator is implemented by backends whose enforcers take new
// values of a running sandbox's credentials.
type CredentialRotator interface {
	// RotateCredentials reads the values of creds (sandbox id's
	// credentials, by Name: all of them, as its Spec declared them)
	// from their sources again and gives them to its enforcer; requests
	// from then on carry them. The placeholders and the CA stay. A
	// source that fails changes nothing.
	RotateCredentials(ctx context.Context, id string, creds []Credential) error
}
