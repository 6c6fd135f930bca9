package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/newsfeed/newsfeed/domain"
)

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 64 << 10

var (
	errTooLarge    = newError(http.StatusRequestEntityTooLarge, "too_large", "request body over 64 KiB")
	errInvalidUTF8 = newError(http.StatusUnprocessableEntity, "invalid_body", "body is not valid UTF-8")
)

func invalidJSON(message string) *Error {
	return newError(http.StatusBadRequest, "invalid_json", message)
}

func invalidBody(message string) *Error {
	return newError(http.StatusUnprocessableEntity, "invalid_body", message)
}

// decodeJSON reads at most MaxBodyBytes and decodes exactly one JSON object
// into v, refusing unknown fields, wrong types and trailing data.
func decodeJSON(c echo.Context, v any) error {
	r := c.Request()
	if r.ContentLength > MaxBodyBytes {
		return errTooLarge
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return invalidJSON("cannot read request body")
	}
	if len(raw) > MaxBodyBytes {
		return errTooLarge
	}
	// encoding/json would silently replace invalid UTF-8, and escaped lone
	// surrogates, with U+FFFD.
	if !utf8.Valid(raw) || hasLoneSurrogate(raw) {
		return errInvalidUTF8
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return invalidJSON("request body must be a JSON object")
	}
	// encoding/json matches field names without regard to case: {"Body": …}
	// would pass for {"body": …}. Names must match exactly.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return invalidJSON(describeJSONError(err))
	}
	known := jsonFieldNames(v)
	for name := range fields {
		if !known[name] {
			return invalidJSON("unknown field " + strconv.Quote(name))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidJSON(describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalidJSON("unexpected data after the JSON object")
	}
	return nil
}

// hasLoneSurrogate reports whether raw JSON holds a \uD800–\uDFFF escape
// that is not half of a surrogate pair: text that is not valid UTF-16, so
// not valid Unicode either.
func hasLoneSurrogate(raw []byte) bool {
	for i := 0; i+6 <= len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex4(raw[i+2 : i+6])
		switch {
		case !ok || r < 0xD800 || r > 0xDFFF:
		case r >= 0xDC00: // a low half with no high half before it
			return true
		default: // a high half must be followed by a low half
			if i+12 > len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
				return true
			}
			if low, ok := hex4(raw[i+8 : i+12]); !ok || low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 6
		}
		i += 5
	}
	return false
}

func hex4(b []byte) (rune, bool) {
	n, err := strconv.ParseUint(string(b), 16, 16) // four hex digits fit 16 bits
	return rune(n), err == nil                     //nolint:gosec // n < 1<<16
}

// jsonFieldNames returns the JSON names of the fields of the struct v points to.
func jsonFieldNames(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	names := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" {
			name = t.Field(i).Name
		}
		names[name] = true
	}
	return names
}

func describeJSONError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return "field " + typeErr.Field + " must be a " + typeErr.Type.String()
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return "unknown field " + strings.TrimPrefix(msg, "json: unknown field ")
	}
	return "request body is not valid JSON"
}

// validBody checks a post body: present, not blank, not too long, storable.
func (s *Server) validBody(body *string) (string, error) {
	if body == nil || strings.TrimSpace(*body) == "" {
		return "", invalidBody("body must not be empty")
	}
	if n := utf8.RuneCountInString(*body); n > s.cfg.MaxChars {
		return "", invalidBody("body is " + strconv.Itoa(n) + " characters; the limit is " + strconv.Itoa(s.cfg.MaxChars))
	}
	if strings.ContainsRune(*body, 0) { // PostgreSQL text cannot hold NUL
		return "", invalidBody("body must not contain NUL characters")
	}
	return *body, nil
}

// pathID parses a path parameter that must be a positive int64.
func pathID(c echo.Context, name string) (int64, error) {
	raw := c.Param(name) // never holds a "/": routing.NoDeeperPaths
	id, err := parsePositive(raw)
	if err != nil {
		return 0, invalidArgument(name + " must be a positive 64-bit integer, got " + strconv.Quote(raw))
	}
	return id, nil
}

func parsePositive(s string) (int64, error) {
	if s == "" || s[0] < '0' || s[0] > '9' { // no sign, no space
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, strconv.ErrSyntax
	}
	return n, nil
}

// queryLimit reads ?limit=, 20 when absent, else 1–100.
func queryLimit(c echo.Context) (int, error) {
	raw := c.QueryParam("limit")
	if raw == "" {
		return 20, nil
	}
	n, err := parsePositive(raw)
	if err != nil || n > 100 {
		return 0, invalidArgument("limit must be an integer from 1 to 100, got " + strconv.Quote(raw))
	}
	return int(n), nil
}

var errBadCursor = invalidArgument("cursor is not one this API gave out")

// maxCursorMicros is 9999-12-31T23:59:59.999999Z in Unix microseconds.
const maxCursorMicros = 253402300799999999

// Cursors are opaque to clients: base64url of a tagged position. A post
// cursor names the last post id returned; ids grow with time, so posts
// created later never shift the pages after it.
func encodePostCursor(lastID int64) *string {
	s := base64.RawURLEncoding.EncodeToString([]byte("p" + strconv.FormatInt(lastID, 10)))
	return &s
}

func decodePostCursor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) < 2 || raw[0] != 'p' {
		return 0, errBadCursor
	}
	id, err := parsePositive(string(raw[1:]))
	if err != nil {
		return 0, errBadCursor
	}
	return id, nil
}

// A follow cursor names the (since, user id) of the last edge returned.
func encodeFollowCursor(c domain.FollowCursor) *string {
	s := base64.RawURLEncoding.EncodeToString([]byte(
		"f" + strconv.FormatInt(c.Since.UnixMicro(), 10) + ":" + strconv.FormatInt(c.UserID, 10)))
	return &s
}

func decodeFollowCursor(s string) (*domain.FollowCursor, error) {
	if s == "" {
		return nil, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) < 2 || raw[0] != 'f' {
		return nil, errBadCursor
	}
	micros, id, ok := strings.Cut(string(raw[1:]), ":")
	if !ok {
		return nil, errBadCursor
	}
	us, err1 := strconv.ParseInt(micros, 10, 64)
	uid, err2 := parsePositive(id)
	// Follows are made "now": a time outside 1970–9999 was not handed out.
	if err1 != nil || err2 != nil || us < 0 || us > maxCursorMicros {
		return nil, errBadCursor
	}
	return &domain.FollowCursor{Since: time.UnixMicro(us).UTC(), UserID: uid}, nil
}
