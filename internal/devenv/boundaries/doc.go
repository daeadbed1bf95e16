// Package boundaries holds only a test: the import rules that keep Agate's lifecycle readable
// from its tree (steps that do not know each other, leaf packages, a cmd/ that only wires) and
// that `make test` checks on every package of the module.
package boundaries
