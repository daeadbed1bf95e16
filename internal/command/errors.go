package command

import "fmt"

// Error codes of docs/contract.md's outcomes.
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodeFailedPrecondition = "failed_precondition"
	CodeUnavailable        = "unavailable"
	CodeInternal           = "internal"
)

// Error is a command's failure as producers see it.
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

// final reports whether the outcome is remembered for the command id (docs/contract.md: transient
// outcomes are not, so the same command can be retried).
func (e *Error) final() bool {
	return e.Code != CodeUnavailable && e.Code != CodeInternal
}

func invalid(field, format string, args ...any) *Error {
	return &Error{Code: CodeInvalidArgument, Field: field, Message: fmt.Sprintf(format, args...)}
}
