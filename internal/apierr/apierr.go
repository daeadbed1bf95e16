// Package apierr is the error of Agate's request-reply API, shared by commands and queries:
// docs/contract.md's "Outcomes and error codes" (code, message, field). It is a leaf, so every
// package that answers producers speaks one error shape without importing another's step.
package apierr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Error codes of docs/contract.md's outcomes.
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodeFailedPrecondition = "failed_precondition"
	CodeUnavailable        = "unavailable"
	CodeInternal           = "internal"
)

// Error is a failure as producers see it.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Code + ": " + e.Field + ": " + e.Message
	}
	return e.Code + ": " + e.Message
}

// Final reports whether the same request would fail the same way again: everything but
// unavailable and internal, which a retry may cure (so a command's outcome is not remembered).
func (e *Error) Final() bool {
	return e.Code != CodeUnavailable && e.Code != CodeInternal
}

// Invalid is an invalid_argument error on field ("" for the body as a whole).
func Invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: fmt.Sprintf(format, args...)}
}

// NotFound is a not_found error on field.
func NotFound(field, format string, args ...any) *Error {
	return &Error{Code: CodeNotFound, Field: field, Message: fmt.Sprintf(format, args...)}
}

var printer = message.NewPrinter(language.English)

// DecodeBody decodes a body its JSON Schema accepted into out, a pointer to the request's
// struct, refusing a member out has no field for; what names the request in the message ("the
// schedule_job command"). It reads with github.com/go-json-experiment/json (encoding/json/v2
// as a module), at about half encoding/json's cost, matching member names exactly as the
// schemas do.
func DecodeBody(body []byte, out any, what string) *Error {
	if err := jsonv2.Unmarshal(body, out, jsonv2.RejectUnknownMembers(true)); err != nil {
		return Invalid("", "body does not match %s: %v", what, err)
	}
	return nil
}

// FromSchema turns a JSON Schema validation failure into invalid_argument on the field it names.
func FromSchema(err error) *Error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return Invalid("", "%v", err)
	}
	leaf := firstLeaf(ve)
	return Invalid(FieldPath(leaf.InstanceLocation), "%s", leaf.ErrorKind.LocalizedString(printer))
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

// FieldPath turns ["triggers","0","cron"] into "triggers[0].cron".
func FieldPath(loc []string) string {
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
