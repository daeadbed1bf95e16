package command

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/agatesched/agate/schemas"
)

// Commands this version applies. (CONTRACT.md lists more; they are answered "unknown command"
// until implemented, never silently dropped.)
var known = []string{"add_calendar", "delete_calendar", "delete_job", "schedule_job", "unschedule_trigger"}

// validator checks command bodies against the JSON Schemas in schemas/json/command.
type validator struct {
	schemas map[string]*jsonschema.Schema
}

func newValidator() (*validator, error) {
	c := jsonschema.NewCompiler()
	v := &validator{schemas: map[string]*jsonschema.Schema{}}
	for _, name := range known {
		path := "json/command/" + name + ".json"
		raw, err := fs.ReadFile(schemas.JSON, path)
		if err != nil {
			return nil, fmt.Errorf("reading schema %s: %w", path, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("parsing schema %s: %w", path, err)
		}
		url := "https://agate.dev/schemas/command/" + name + ".json"
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("adding schema %s: %w", path, err)
		}
		sch, err := c.Compile(url)
		if err != nil {
			return nil, fmt.Errorf("compiling schema %s: %w", path, err)
		}
		v.schemas[name] = sch
	}
	return v, nil
}

var printer = message.NewPrinter(language.English)

// check validates body for command cmd and decodes it into out.
func (v *validator) check(cmd string, body []byte, out any) *Error {
	sch, ok := v.schemas[cmd]
	if !ok {
		return invalid("", "unknown command %q; this scheduler accepts: %s", cmd, strings.Join(known, ", "))
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return invalid("", "body is not valid JSON: %v", err)
	}
	if err := sch.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			leaf := firstLeaf(ve)
			return invalid(fieldPath(leaf.InstanceLocation), "%s", leaf.ErrorKind.LocalizedString(printer))
		}
		return invalid("", "%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return invalid("", "body does not match the %s command: %v", cmd, err)
	}
	return nil
}

// firstLeaf walks to the most specific cause: the one that names the offending field.
func firstLeaf(ve *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(ve.Causes) > 0 {
		// Prefer the deepest instance location: "oneOf" failures list one cause per branch.
		best := ve.Causes[0]
		for _, c := range ve.Causes[1:] {
			if len(c.InstanceLocation) > len(best.InstanceLocation) {
				best = c
			}
		}
		ve = best
	}
	return ve
}

// fieldPath turns ["triggers","0","cron"] into "triggers[0].cron".
func fieldPath(loc []string) string {
	var b strings.Builder
	for _, p := range loc {
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// isKnown reports whether cmd is a command this version applies.
func isKnown(cmd string) bool { return slices.Contains(known, cmd) }
