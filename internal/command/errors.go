package command

import "github.com/agatesched/agate/internal/apierr"

// Error codes of docs/contract.md's outcomes (internal/apierr, shared with queries).
const (
	CodeInvalidArgument    = apierr.CodeInvalidArgument
	CodeNotFound           = apierr.CodeNotFound
	CodeAlreadyExists      = apierr.CodeAlreadyExists
	CodeFailedPrecondition = apierr.CodeFailedPrecondition
	CodeUnavailable        = apierr.CodeUnavailable
	CodeInternal           = apierr.CodeInternal
)

// Error is a command's failure as producers see it; queries answer with the same type.
// Final says whether the outcome is remembered for the command id (docs/contract.md: transient
// outcomes are not, so the same command can be retried).
type Error = apierr.Error

func invalid(field, format string, args ...any) *Error {
	return apierr.Invalid(field, format, args...)
}
