package cli

import (
	"runtime/debug"
	"strings"
)

// Version describes the running binary for --version, from the build information the Go
// toolchain embeds: the module version, and the commit, its time and whether the tree had
// uncommitted changes when the binary was built from a checkout ("go build", "go install").
func Version(name string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information)"
	}
	return formatVersion(name, info)
}

func formatVersion(name string, info *debug.BuildInfo) string {
	var b strings.Builder
	b.WriteString(name)
	b.WriteString(" ")
	if v := info.Main.Version; v != "" {
		b.WriteString(v)
	} else {
		b.WriteString("(devel)")
	}
	var details []string
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		details = append(details, "revision "+rev)
	}
	if t := settings["vcs.time"]; t != "" {
		details = append(details, "committed "+t)
	}
	if settings["vcs.modified"] == "true" {
		details = append(details, "with uncommitted changes")
	}
	if info.GoVersion != "" {
		details = append(details, "built with "+info.GoVersion)
	}
	if len(details) > 0 {
		b.WriteString(" (" + strings.Join(details, ", ") + ")")
	}
	return b.String()
}
