package app

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// keyDecl is a key as Config.keys declares it.
type keyDecl struct {
	key     string        // feed.max_len: the koanf tags of the field and its struct
	field   reflect.Value // the field of the Config being loaded
	def     any           // the default, of the field's type
	values  string        // what values it takes, for docs/CONFIG.md
	doc     string        // what it does, for docs/CONFIG.md
	check   func(key string) string
	related []string // other keys that check reads
}

// bound is what values a key takes: said for the docs, and checked.
type bound[T any] struct {
	values string
	// check says what is wrong with v (after "<source>: <key>: "), or "".
	check   func(key string, v T) string
	related []string
}

// declare declares the key held by field: its default, its bound and what
// it does.
func declare[T any](field *T, def T, b bound[T], doc string) *keyDecl {
	return &keyDecl{field: reflect.ValueOf(field).Elem(), def: def, values: b.values, doc: doc, related: b.related,
		check: func(key string) string {
			if b.check == nil {
				return ""
			}
			return b.check(key, *field)
		}}
}

var durationType = reflect.TypeFor[time.Duration]()

// declaredKeys returns the keys of c, each named by its field's koanf tags
// and its struct's ("feed" "max_len": feed.max_len). It panics when a field
// of Config is not declared exactly once: a mistake that every test, and
// every run, meets at once.
func declaredKeys(c *Config) []*keyDecl {
	names := map[uintptr]string{} // a field's address → its key
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		for i := range v.NumField() {
			tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("koanf"), ",")
			if f := v.Field(i); f.Kind() == reflect.Struct && f.Type() != durationType {
				walk(f, prefix+tag+".")
			} else {
				names[f.Addr().Pointer()] = prefix + tag
			}
		}
	}
	walk(reflect.ValueOf(c).Elem(), "")
	keys := c.keys()
	for _, k := range keys {
		name, ok := names[k.field.Addr().Pointer()]
		if !ok {
			panic(fmt.Sprintf("Config.keys declares a %s twice, or one that is no field of Config", k.field.Type()))
		}
		k.key = name
		delete(names, k.field.Addr().Pointer())
	}
	if len(names) > 0 {
		panic(fmt.Sprintf("Config.keys does not declare %v", slices.Sorted(maps.Values(names))))
	}
	return keys
}

// declared is every key by its name, declared on a Config of its own: what
// the keys are, their types and defaults, for every use but loading.
var declared = func() map[string]*keyDecl {
	m := map[string]*keyDecl{}
	for _, k := range declaredKeys(&Config{}) {
		m[k.key] = k
	}
	return m
}()

// KnownKeys lists every configuration key, sorted.
func KnownKeys() []string {
	return slices.Sorted(maps.Keys(declared))
}

// envName is key's environment variable: NEWSFEED_FEED_MAX_LEN for feed.max_len.
func envName(key string) string {
	return "NEWSFEED_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// shown is a text value as a problem shows it: quoted, secrets masked.
func shown(key, v string) string { return strconv.Quote(maskValue(key, v)) }

// number is the types of keys that bounds compare.
type number interface {
	~int | ~int32 | ~int64 | ~float64
}

// anyValue takes every value of the key's type.
func anyValue[T any]() bound[T] {
	if _, isBool := any(*new(T)).(bool); isBool {
		return bound[T]{values: "`true` or `false`"}
	}
	return bound[T]{values: "any"}
}

func positive[T number]() bound[T] {
	return bound[T]{values: "> 0", check: func(_ string, v T) string {
		switch {
		case v > 0:
			return ""
		case reflect.TypeOf(v) == durationType:
			return fmt.Sprintf("must be a positive duration, got %v", v)
		}
		return fmt.Sprintf("must be positive, got %v", v)
	}}
}

// notNegative takes 0, which turns the key's limit off, and more.
func notNegative[T number]() bound[T] { return notNegativeBecause[T]("0 turns it off") }

// notNegativeBecause takes 0, which does what zero says, and more.
func notNegativeBecause[T number](zero string) bound[T] {
	return bound[T]{values: "≥ 0", check: func(_ string, v T) string {
		if v >= 0 {
			return ""
		}
		return fmt.Sprintf("must not be negative (%s), got %v", zero, v)
	}}
}

func atLeast[T number](lo T) bound[T] {
	return bound[T]{values: fmt.Sprintf("≥ %v", lo), check: func(_ string, v T) string {
		if v >= lo {
			return ""
		}
		return fmt.Sprintf("must be at least %v, got %v", lo, v)
	}}
}

func between[T number](lo, hi T) bound[T] {
	return bound[T]{values: fmt.Sprintf("%v to %v", lo, hi), check: func(_ string, v T) string {
		if v >= lo && v <= hi { // false for NaN
			return ""
		}
		return fmt.Sprintf("must be from %v to %v, got %v", lo, hi, v)
	}}
}

func notEmpty() bound[string] {
	return bound[string]{values: "not empty", check: func(_, v string) string {
		if v == "" {
			return "must not be empty"
		}
		return ""
	}}
}

// oneOf takes one of values.
func oneOf(values ...string) bound[string] {
	return bound[string]{values: words(values, "`", "`"), check: func(_, v string) string {
		if slices.Contains(values, v) {
			return ""
		}
		return fmt.Sprintf("must be %s, got %q", words(values, "", ""), v)
	}}
}

// words writes "a, b or c", each between before and after.
func words(list []string, before, after string) string {
	w := make([]string, len(list))
	for i, v := range list {
		w[i] = before + v + after
	}
	return strings.Join(w[:len(w)-1], ", ") + " or " + w[len(w)-1]
}

func adminToken() bound[string] {
	return bound[string]{values: fmt.Sprintf("empty, or at least %d characters", minAdminToken), check: func(_, v string) string {
		if n := len(v); n > 0 && n < minAdminToken {
			return fmt.Sprintf("must be at least %d characters (a random string: openssl rand -hex 32), got %d", minAdminToken, n)
		}
		return ""
	}}
}

// collectorURL takes what tracing reads: empty, or an http(s) URL.
func collectorURL() bound[string] {
	return bound[string]{values: "empty, or an `http://` or `https://` URL", check: func(key, v string) string {
		if _, err := traceEndpoint(v); v != "" && err != nil {
			return shown(key, v) + " is not an http:// or https:// URL of a collector (http://collector:4318)"
		}
		return ""
	}}
}

// postgresURL takes what the roles' pgx pools take, parsed as they parse it
// without connecting: a postgres:// or postgresql:// URL, or a key=value
// connection string; optional takes empty too (none).
func postgresURL(optional bool) bound[string] {
	values := "`postgres://` or `postgresql://` URL, or `key=value` connection string"
	if optional {
		values = "empty, or a " + values
	}
	return bound[string]{values: values, check: func(key, v string) string {
		switch scheme, _, isURL := strings.Cut(v, "://"); {
		case v == "" && optional:
			return ""
		case v == "":
			return "must not be empty"
		case isURL && scheme != "postgres" && scheme != "postgresql":
			return shown(key, v) + " is not a postgres:// or postgresql:// URL"
		}
		if _, err := pgconn.ParseConfig(v); err != nil {
			return fmt.Sprintf("%s is not a PostgreSQL URL or key=value connection string: %s", shown(key, v), causeOf(err))
		}
		return ""
	}}
}

// redisURL takes what the roles' Redis clients take, parsed as they parse
// it without connecting (empty is refused as such): a redis://, rediss:// or unix:// URL, not unix://
// when *cluster.
func redisURL(cluster *bool) bound[string] {
	return bound[string]{values: "`redis://`, `rediss://` or (not a cluster) `unix://` URL", related: []string{"redis.cluster"},
		check: func(key, v string) string {
			schemes, parse := []string{"redis", "rediss", "unix"}, func(s string) error { _, err := redis.ParseURL(s); return err }
			if *cluster {
				schemes, parse = schemes[:2], func(s string) error { _, err := redis.ParseClusterURL(s); return err }
			}
			if scheme, _, _ := strings.Cut(v, "://"); v != "" && !slices.Contains(schemes, scheme) {
				return fmt.Sprintf("%s is not a %s URL", shown(key, v), words(schemes, "", "://"))
			}
			if v == "" {
				return "must not be empty"
			}
			if err := parse(v); err != nil {
				return fmt.Sprintf("%s is not a Redis URL: %s", shown(key, v), causeOf(err))
			}
			return ""
		}}
}

// listenAddr takes what a role listens on: host:port, the port a number
// (":8080", "127.0.0.1:9090"); optional takes empty too (off).
func listenAddr(optional bool) bound[string] {
	values := "`host:port`, port numeric"
	if optional {
		values = "empty, or " + values
	}
	return bound[string]{values: values, check: func(key, v string) string {
		if v == "" && optional {
			return ""
		}
		_, port, err := net.SplitHostPort(v)
		if err != nil {
			return fmt.Sprintf("%s is not a listen address host:port (like :8080): %s", shown(key, v), causeOf(err))
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Sprintf("%s is not a listen address host:port (like :8080): port %q is not a number from 0 to 65535", shown(key, v), port)
		}
		return ""
	}}
}

// causeOf is what err says is wrong, without the value that a url.Error,
// a net.AddrError or pgconn's error quotes (it may hold a password).
func causeOf(err error) string {
	var urlErr *url.Error
	var addrErr *net.AddrError
	var pgErr *pgconn.ParseConfigError
	switch {
	case errors.As(err, &pgErr):
		// "cannot parse `<value>`: <what> (<cause>)": the cause may quote
		// the value too, unless it is a url.Error.
		text := pgErr.Error()
		what, _, _ := strings.Cut(text[strings.LastIndex(text, "`: ")+3:], " (")
		if errors.As(pgErr.Unwrap(), &urlErr) {
			what += ": " + causeOf(urlErr)
		}
		return what
	case errors.As(err, &urlErr):
		return urlErr.Err.Error()
	case errors.As(err, &addrErr):
		return addrErr.Err
	}
	return err.Error()
}
