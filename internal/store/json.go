package store

import (
	"bytes"
	"encoding/json"
	"strings"
)

// JSONHasNUL reports whether a JSON document holds a NUL character in a string: PostgreSQL's
// text and jsonb cannot store one, so a writer checks before it stores what it was sent.
func JSONHasNUL(body []byte) bool {
	if !bytes.Contains(body, []byte(`\u0000`)) {
		return false // the only way valid JSON spells NUL
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return true
		}
	}
}
