//go:build !(linux || darwin)

package devcluster

// takeTerminal does nothing where process groups and terminals work differently.
func takeTerminal() (restore func()) { return func() {} }
