package composecheck

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the module root, where compose.yaml and the Dockerfile live.
const repoRoot = "../../.."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	keyword string // upper case: FROM, RUN, COPY, ...
	args    string
}

// parseDockerfile splits a Dockerfile into instructions. It knows comments, blank lines and
// backslash continuations, which is all this repository's Dockerfile uses.
func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\"))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(trimmed)
		full := strings.TrimSpace(cur.String())
		cur.Reset()
		if full == "" {
			continue
		}
		keyword, args, _ := strings.Cut(full, " ")
		out = append(out, instruction{keyword: strings.ToUpper(keyword), args: strings.TrimSpace(args)})
	}
	if cur.Len() > 0 {
		t.Fatalf("%s ends inside a continued line", path)
	}
	return out
}

// stages splits instructions at each FROM.
func stages(ins []instruction) [][]instruction {
	var out [][]instruction
	for _, in := range ins {
		if in.keyword == "FROM" {
			out = append(out, nil)
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], in)
		}
	}
	return out
}

var cmdRef = regexp.MustCompile(`\./cmd/([A-Za-z0-9_.-]+)`)

// builtCommands returns the ./cmd/<name> packages named by the build stage's `go build` lines.
func builtCommands(t *testing.T, build []instruction) []string {
	t.Helper()
	var names []string
	for _, in := range build {
		if in.keyword != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		for _, m := range cmdRef.FindAllStringSubmatch(in.args, -1) {
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
	}
	return names
}

// isMainPackage reports whether dir holds Go files (tests aside) of package main.
func isMainPackage(t *testing.T, dir string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if af.Name.Name != "main" {
			return false
		}
		found = true
	}
	return found
}

func TestDockerfileBuildsTheCommands(t *testing.T) {
	all := stages(parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile")))
	if len(all) < 2 {
		t.Fatalf("Dockerfile has %d stages; want a build stage and a final stage", len(all))
	}
	var build []instruction
	for _, st := range all {
		if strings.HasPrefix(st[0].args, "golang:") {
			build = st
		}
	}
	if build == nil {
		t.Fatal("no build stage FROM golang:<version>")
	}
	built := builtCommands(t, build)
	for _, want := range []string{"scheduler", "worker", "agatectl"} {
		if !slices.Contains(built, want) {
			t.Errorf("the build stage does not build ./cmd/%s (it builds %v)", want, built)
		}
	}
	for _, name := range built {
		dir := filepath.Join(repoRoot, "cmd", name)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			t.Errorf("the Dockerfile builds ./cmd/%s, which is not a directory", name)
			continue
		}
		if !isMainPackage(t, dir) {
			t.Errorf("the Dockerfile builds ./cmd/%s, which is not a main package", name)
		}
	}

	var buildText strings.Builder
	for _, in := range build {
		buildText.WriteString(in.keyword + " " + in.args + "\n")
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath"} {
		if !strings.Contains(buildText.String(), want) {
			t.Errorf("the build stage does not set %s", want)
		}
	}

	final := all[len(all)-1]
	var copied, user string
	for _, in := range final {
		switch in.keyword {
		case "COPY":
			if strings.Contains(in.args, "--from=") {
				copied += " " + in.args
			}
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			// The image serves scheduler, worker and agatectl: compose picks one with command.
			t.Errorf("the final stage fixes ENTRYPOINT %s; compose.yaml chooses the binary with command", in.args)
		}
	}
	for _, name := range built {
		if !regexp.MustCompile(`/` + regexp.QuoteMeta(name) + `(\s|$)`).MatchString(copied) {
			t.Errorf("the final stage does not copy the %s binary from the build stage", name)
		}
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "root" || uid == "0" {
		t.Errorf("the final stage runs as %q; want a non-root USER", user)
	}
}

func TestDockerignoreKeepsTheSources(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimPrefix(line, "/"))
		}
	}
	if !slices.Contains(patterns, ".git") {
		t.Error(".dockerignore does not exclude .git")
	}
	// What the build needs must stay in the context.
	for _, needed := range []string{"go.mod", "go.sum", "cmd", "internal", "schemas"} {
		for _, p := range patterns {
			if ok, _ := filepath.Match(p, needed); ok || p == needed || p == "*" || p == "**" {
				t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", p, needed)
			}
		}
	}
}
