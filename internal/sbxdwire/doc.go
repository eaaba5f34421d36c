// Package sbxdwire is the wire protocol of sbxd, the in-sandbox agent
// (package sbxd/agent, run by cmd/sbxd) and its host-side client (package
// sbxd): the protocol number, the routes and headers, the request and
// answer types, the error codes, the output frames and the yamux session
// settings both ends use. Package sbxd documents the protocol as a whole
// and re-exports the types its API uses (JobStatus, GrepRequest, ...).
//
// It imports the standard library, yamux and internal/errdefs only, never
// package backend: the agent links it, and a change to the host-side
// contract alone must leave the agent's binary (internal/sbxdbin) as it is.
// The client's conversions into backend's types live in package sbxd.
package sbxdwire
