package command

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"slices"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/schemas"
)

// applier applies one decoded command inside the command's transaction.
type applier func(ctx context.Context, a *applyCtx) (any, error)

// command is a decoded command: what applies it, the lock partitions it needs, and the decoded
// body (a *T of decodeAs).
type command struct {
	apply applier
	scope scope
	value any
}

// decoder validates a body for one command (doc, as parseBody parsed it) and returns what
// applies it.
type decoder func(v *validator, cmd string, doc any, body []byte) (command, *Error)

// decodeAs builds the decoder of a command whose body decodes into T. The command locks the
// partitions of the jobs *T names when it implements jobScoped, else every partition.
func decodeAs[T any](apply func(*applyCtx, context.Context, *T) (any, error)) decoder {
	return func(v *validator, cmd string, doc any, body []byte) (command, *Error) {
		var c T
		if e := v.check(cmd, doc, body, &c); e != nil {
			return command{}, e
		}
		return command{apply: func(ctx context.Context, a *applyCtx) (any, error) { return apply(a, ctx, &c) },
			scope: scopeOf(&c), value: &c}, nil
	}
}

// decoders are the commands of docs/contract.md.
var decoders = map[string]decoder{
	"add_calendar":       decodeAs((*applyCtx).addCalendar),
	"add_job":            decodeAs((*applyCtx).addJob),
	"delete_calendar":    decodeAs((*applyCtx).deleteCalendar),
	"delete_job":         decodeAs((*applyCtx).deleteJob),
	"interrupt_job":      decodeAs((*applyCtx).interruptJob),
	"pause_all":          decodeAs((*applyCtx).pauseAll),
	"pause_group":        decodeAs((*applyCtx).pauseGroup),
	"pause_trigger":      decodeAs((*applyCtx).pauseTrigger),
	"reschedule_trigger": decodeAs((*applyCtx).rescheduleTrigger),
	"resume_all":         decodeAs((*applyCtx).resumeAll),
	"resume_group":       decodeAs((*applyCtx).resumeGroup),
	"resume_trigger":     decodeAs((*applyCtx).resumeTrigger),
	"schedule_job":       decodeAs((*applyCtx).scheduleJob),
	"schedule_trigger":   decodeAs((*applyCtx).scheduleTrigger),
	"trigger_job":        decodeAs((*applyCtx).triggerJob),
	"unschedule_trigger": decodeAs((*applyCtx).unscheduleTrigger),
}

// known lists the commands, sorted, for messages.
var known = slices.Sorted(maps.Keys(decoders))

// validator checks command bodies against the JSON Schemas in schemas/json/command.
type validator struct {
	schemas map[string]*jsonschema.Schema
}

func newValidator() (*validator, error) {
	c := jsonschema.NewCompiler()
	v := &validator{schemas: map[string]*jsonschema.Schema{}}
	// Every schema is added before any is compiled: a command's schema may refer to another's
	// definitions (schedule_trigger uses schedule_job's trigger).
	url := func(name string) string { return "https://agate.dev/schemas/command/" + name + ".json" }
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
		if err := c.AddResource(url(name), doc); err != nil {
			return nil, fmt.Errorf("adding schema %s: %w", path, err)
		}
	}
	for _, name := range known {
		sch, err := c.Compile(url(name))
		if err != nil {
			return nil, fmt.Errorf("compiling schema of %s: %w", name, err)
		}
		v.schemas[name] = sch
	}
	return v, nil
}

// parseBody parses a command body as the JSON Schema validator reads it (numbers as
// json.Number), or fails on anything that is not one JSON value.
func parseBody(body []byte) (any, error) {
	return jsonschema.UnmarshalJSON(bytes.NewReader(body))
}

// check validates body for command cmd and decodes it into out. doc is body as parseBody
// parsed it: the schema reads that, out is decoded from body.
func (v *validator) check(cmd string, doc any, body []byte, out any) *Error {
	sch, ok := v.schemas[cmd]
	if !ok {
		return &Error{Code: CodeInternal, Message: fmt.Sprintf("no schema for command %q", cmd)} // a build without the schema file
	}
	if err := sch.Validate(doc); err != nil {
		return apierr.FromSchema(err)
	}
	return apierr.DecodeBody(body, out, "the "+cmd+" command")
}

// isKnown reports whether cmd is a command this version applies.
func isKnown(cmd string) bool { _, ok := decoders[cmd]; return ok }
