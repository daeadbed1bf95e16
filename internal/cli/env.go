package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envAnnotation is the pflag annotation that records a flag's environment variable.
const envAnnotation = "agate_env"

// BindEnv binds the flag name of fs to the environment variable env and appends "(env ENV)" to
// the flag's usage. It panics if fs has no such flag: that is a programming error in a main
// package, found by its first --help.
func BindEnv(fs *pflag.FlagSet, name, env string) {
	fl := fs.Lookup(name)
	if fl == nil {
		panic(fmt.Sprintf("cli.BindEnv: no flag --%s", name))
	}
	if fl.Annotations == nil {
		fl.Annotations = map[string][]string{}
	}
	fl.Annotations[envAnnotation] = []string{env}
	fl.Usage += " (env " + env + ")"
}

// EnvOf returns the environment variable bound to fl, if any.
func EnvOf(fl *pflag.Flag) (string, bool) {
	v := fl.Annotations[envAnnotation]
	if len(v) != 1 {
		return "", false
	}
	return v[0], true
}

// ApplyEnv sets every flag of fs that was not given on the command line from its environment
// variable, when that variable is set and not empty. It reports every value a flag rejects.
func ApplyEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(fl *pflag.Flag) {
		env, ok := EnvOf(fl)
		if !ok || fl.Changed {
			return
		}
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return
		}
		if err := fl.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q is not a valid --%s: %w", env, v, fl.Name, err))
		}
	})
	return errors.Join(errs...)
}

// Setup prepares root, the top command of a binary: a --version flag that prints [Version] for
// the binary named name, and a pre-run hook that applies the environment to the flags of
// whichever command runs (see [ApplyEnv]). Commands under root must not set their own
// PersistentPreRunE, which would replace the hook.
func Setup(root *cobra.Command, name string) {
	root.Version = Version(name)
	root.SetVersionTemplate("{{.Version}}\n")
	// Our own flag, so that cobra does not take -v (agatebench's --verbose) for --version.
	root.Flags().Bool("version", false, "print the version and exit")
	prev := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := ApplyEnv(cmd.Flags()); err != nil {
			return err
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}
