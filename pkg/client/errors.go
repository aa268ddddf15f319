package client

import (
	"errors"
	"fmt"
	"strings"
)

// ServiceError is a service's error reply (a NATS micro error: its
// Nats-Service-Error-Code and Nats-Service-Error headers), with the body
// the service sent with it (a rejected composition's SubmitReply).
// errors.Is matches it against ErrNotFound, ErrBadRequest and
// ErrUnavailable by its code; errors.As gives it whole.
type ServiceError struct {
	Subject     string // what was asked
	Code        string // "404", "400", "503"...
	Description string
	Body        []byte
}

// Error is the service's description, as it wrote it.
func (e *ServiceError) Error() string { return e.Description }

// Is matches the sentinels by code.
func (e *ServiceError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == "404"
	case ErrBadRequest:
		return e.Code == "400"
	case ErrUnavailable:
		return strings.HasPrefix(e.Code, "5")
	}
	return false
}

// Sentinels a *ServiceError matches (errors.Is) by its code.
var (
	ErrNotFound    = errors.New("not found")           // 404: no such workflow
	ErrBadRequest  = errors.New("bad request")         // 400: a rejected composition, a bad query
	ErrUnavailable = errors.New("service unavailable") // 5xx: the service cannot do it now
)

// ErrDenied is wrapped by the error of a request the NATS server refused
// this identity (its publish, or its reply inbox's subscription).
var ErrDenied = errors.New("not allowed for this identity")

// ErrRepliesDenied wraps ErrDenied for a request whose reply inbox the
// server refused this identity: what only an operator may ask (submit,
// control, rebuild) comes back to the operator's inbox prefix, which a
// viewer may not subscribe to, whatever the request's own subject.
var ErrRepliesDenied = fmt.Errorf("%w: its replies come to an operator's inbox", ErrDenied)

// RequestError is a request that got no usable reply: refused (ErrDenied),
// not answered (nats.ErrNoResponders, nats.ErrTimeout), answered with what
// could not be read, or asking for a key its bucket does not hold
// (ErrNotFound). A service's error reply is a *ServiceError
// instead.
type RequestError struct {
	Subject string
	Err     error
}

func (e *RequestError) Error() string { return e.Subject + ": " + e.Err.Error() }

func (e *RequestError) Unwrap() error { return e.Err }
