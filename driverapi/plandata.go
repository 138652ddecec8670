package driverapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// EncodePlanJSON serialises a driver's plan (the data of its Profile)
// deterministically: the fields in their declared order, no HTML escaping
// (paths keep their bytes), no trailing newline. Map-free plan types give
// the same bytes for the same plan, so equal plans have equal digests.
func EncodePlanJSON(plan any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(plan); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// DecodePlanJSON parses profile data into plan strictly: one JSON value,
// no field the plan type lacks, nothing after it. A driver re-checks what
// it relies on afterwards; this only makes sure that what it checks is
// all the data said (an unknown field or a second object could otherwise
// carry what a later version would read). Errors are *ProfileError, whose
// reason starts with what.
func DecodePlanJSON(what string, data []byte, plan any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(plan); err != nil {
		return &ProfileError{Reason: what + " is not valid: " + err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &ProfileError{Reason: what + " has data after its end"}
	}
	return nil
}
