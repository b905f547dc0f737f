// Command docrun runs the shell blocks of the README and the docs'
// walk-throughs, verbatim, on a fresh copy of the tree against a fresh
// development lockd, and fails when a command fails or prints what the
// doc does not promise.
//
// Every ```sh block runs, in order, as one `bash -e -o pipefail` script in
// the copy's root, unless an HTML comment on the line before its fence says
// otherwise:
//
//	<!-- docrun: serve -->       start the block in the background and wait
//	                             for lockd to be ready (the README's lockd)
//	<!-- docrun: skip REASON --> do not run it; REASON is printed
//	<!-- docrun: exit N -->      the block ends with exit status N
//
// A block passes when it exits 0 (or the status it says) and, unless it is followed by a promised
// output, writes nothing to stderr. A promised output is a ```text block
// right after it, preceded by <!-- docrun: output -->: the block's output
// (stdout, then stderr) must match it line by line, where a line "…"
// stands for any number of lines and "…" inside a line for any text.
// Background jobs a block starts (`cmd &`) go on into the next blocks and
// are killed at the end.
//
//	go run ./ci/docrun README.md docs/*.md
package main
