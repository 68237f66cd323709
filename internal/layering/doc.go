// Package layering holds the test that keeps npl's packages in layers:
// lbmodel and contract at the bottom, the providers and npl-edge above the
// model and beside each other, npl-lbsync and npl-agent above those, the
// binaries on top. It has no code of its own.
package layering
