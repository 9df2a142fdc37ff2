// Package bench holds no code of its own: its subpackages measure the
// policy (see README.md), and its test checks that every path the
// repository's markdown cites under bench/results exists, so that the
// results kept in the tree are the ones the docs cite.
package bench
