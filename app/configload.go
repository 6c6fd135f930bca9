package app

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// ConfigSources are where a configuration is read from. Each source beats
// the ones before it: the defaults, File, Environ, then Flags.
type ConfigSources struct {
	// File is the YAML file's path; empty reads no file.
	File string
	// FileRequired: File was named on the command line (--config) and must
	// exist; the default config.yaml is read only when it exists.
	FileRequired bool
	// Environ is the environment as os.Environ returns it: NEWSFEED_<KEY>
	// sets a key.
	Environ []string
	// Flags are values given on the command line.
	Flags []FlagValue
}

// FlagValue is a key set on the command line.
type FlagValue struct {
	// Key is the configuration key it sets (fanout.concurrency).
	Key string
	// Value is the flag's value, typed as the flag is.
	Value any
	// Flag names what set it, for the effective configuration and errors:
	// the flag ("--concurrency"), or the command that sets the key itself
	// ("newsfeed-bench").
	Flag string
}

// The kinds of ConfigSource, in the order in which they override each other.
const (
	SourceDefault = "default"
	SourceFile    = "file"
	SourceEnv     = "env"
	SourceFlag    = "flag"
)

// ConfigSource says where a key's value came from.
type ConfigSource struct {
	// Kind is SourceDefault, SourceFile, SourceEnv or SourceFlag.
	Kind string `json:"kind"`
	// Name is the file's path, the environment variable or the flag; empty
	// for a default.
	Name string `json:"name,omitempty"`
}

// String names the source as errors and `config check` do: "default",
// "config file config.yaml", "NEWSFEED_FEED_MAX_LEN", "flag --concurrency".
func (s ConfigSource) String() string {
	switch s.Kind {
	case SourceFile:
		return "config file " + s.Name
	case SourceEnv:
		return s.Name
	case SourceFlag:
		if strings.HasPrefix(s.Name, "-") {
			return "flag " + s.Name
		}
		return s.Name
	default:
		return SourceDefault
	}
}

// Setting is one key of an effective configuration: its value as text,
// secrets masked (see maskValue), and where the value came from.
type Setting struct {
	Key    string       `json:"key"`
	Value  string       `json:"value"`
	Source ConfigSource `json:"source"`
}

// ConfigError is a configuration that a process cannot run with: every
// problem found, each naming the key and where its value came from, on one
// line.
type ConfigError struct {
	// Problems are the problems, each "<source>: <key>: <what is wrong>".
	Problems []string
}

func (e *ConfigError) Error() string { return strings.Join(e.Problems, "; ") }

// LoadConfig reads, checks and returns the configuration from src. A bad
// configuration is a *ConfigError; a file that cannot be read or parsed is
// an error that names the file.
func LoadConfig(src ConfigSources) (*Config, error) {
	l, err := loadConfig(src)
	if err != nil {
		return nil, err
	}
	return l.cfg, nil
}

// EffectiveConfig is LoadConfig that also returns every key with its value
// (secrets masked) and its source, sorted by key, and the NEWSFEED_
// variables of src.Environ that name no key (they are ignored).
func EffectiveConfig(src ConfigSources) (*Config, []Setting, []string, error) {
	l, err := loadConfig(src)
	if err != nil {
		return nil, nil, nil, err
	}
	settings := make([]Setting, 0, len(l.values))
	for _, key := range KnownKeys() {
		v := l.values[key]
		settings = append(settings, Setting{Key: key, Value: maskValue(key, formatValue(v.value)), Source: v.source})
	}
	return l.cfg, settings, l.ignoredEnv, nil
}

// sourced is a key's value, typed as its field, and where it came from.
type sourced struct {
	value  any
	source ConfigSource
}

// loaded is a configuration as read: the Config, and each key's value and
// source.
type loaded struct {
	cfg        *Config
	values     map[string]sourced
	ignoredEnv []string
}

// configLoader merges the sources into values, key by key, and collects the
// problems of every source before it gives up, so that one run names them all.
type configLoader struct {
	values   map[string]sourced
	problems []string
}

func loadConfig(src ConfigSources) (*loaded, error) {
	ld := &configLoader{values: make(map[string]sourced, len(declared))}
	for key, k := range declared {
		ld.values[key] = sourced{value: k.def, source: ConfigSource{Kind: SourceDefault}}
	}
	if err := ld.readFile(src.File, src.FileRequired); err != nil {
		return nil, err
	}
	ignored, err := ld.readEnv(src.Environ)
	if err != nil {
		return nil, err
	}
	for _, f := range src.Flags {
		if _, known := declared[f.Key]; !known {
			return nil, fmt.Errorf("%s sets %s, which is no configuration key", ConfigSource{Kind: SourceFlag, Name: f.Flag}, f.Key)
		}
		ld.set(f.Key, f.Value, ConfigSource{Kind: SourceFlag, Name: f.Flag})
	}
	if len(ld.problems) > 0 {
		return nil, &ConfigError{Problems: ld.problems}
	}

	var cfg Config
	keys := declaredKeys(&cfg)
	for _, k := range keys {
		k.field.Set(reflect.ValueOf(ld.values[k.key].value))
	}
	for _, k := range keys {
		if text := k.check(k.key); text != "" {
			ld.problems = append(ld.problems, ld.describe(problem{key: k.key, text: text, related: k.related}))
		}
	}
	for _, p := range cfg.together() {
		ld.problems = append(ld.problems, ld.describe(p))
	}
	if len(ld.problems) > 0 {
		return nil, &ConfigError{Problems: ld.problems}
	}
	return &loaded{cfg: &cfg, values: ld.values, ignoredEnv: ignored}, nil
}

// set decodes raw as key's type and records it from source, or records
// what is wrong with it.
func (ld *configLoader) set(key string, raw any, source ConfigSource) {
	v, err := decodeValue(key, declared[key].field.Type(), raw)
	if err != nil {
		ld.problems = append(ld.problems, fmt.Sprintf("%s: %s: %v", source, key, err))
		return
	}
	ld.values[key] = sourced{value: v, source: source}
}

// readFile reads the YAML file at path, when there is one to read: every key
// must be known and every value of its key's type.
func (ld *configLoader) readFile(path string, required bool) error {
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) && !required {
		return nil
	}
	k := koanf.New(".")
	if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	source := ConfigSource{Kind: SourceFile, Name: path}
	flat := k.All()
	for _, key := range slices.Sorted(maps.Keys(flat)) {
		if _, known := declared[key]; !known {
			if flat[key] == nil && isSection(key) {
				continue // a section whose keys are all commented out
			}
			ld.problems = append(ld.problems, fmt.Sprintf("%s: %s", source, unknownKey(key)))
			continue
		}
		ld.set(key, flat[key], source)
	}
	return nil
}

// isSection tells whether key is the name of a section of keys (feed).
func isSection(key string) bool {
	for known := range declared {
		if strings.HasPrefix(known, key+".") {
			return true
		}
	}
	return false
}

// unknownKey says why key is not one: a section written as a value, a value
// written as a section, or a name that does not exist.
func unknownKey(key string) string {
	for _, known := range KnownKeys() {
		if strings.HasPrefix(known, key+".") {
			return fmt.Sprintf("%s: is a section of keys (such as %s), not a value", key, known)
		}
		if strings.HasPrefix(key, known+".") {
			return fmt.Sprintf("%s: is a value, not a section of keys", known)
		}
	}
	return fmt.Sprintf("unknown key %s", key)
}

// envKeys maps NEWSFEED_FEED_MAX_LEN to feed.max_len for every key.
var envKeys = func() map[string]string {
	m := make(map[string]string, len(declared))
	for key := range declared {
		m[envName(key)] = key
	}
	return m
}()

// readEnv takes every NEWSFEED_<KEY> of environ (the last of a name, as
// getenv) and returns, sorted, the NEWSFEED_ variables that name no key.
func (ld *configLoader) readEnv(environ []string) ([]string, error) {
	var ignored []string
	k := koanf.New(".")
	err := k.Load(env.Provider(".", env.Opt{
		Prefix:      "NEWSFEED_",
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			if _, known := envKeys[name]; !known {
				ignored = append(ignored, name)
				return "", nil
			}
			return name, value // not the key: its dots would make sections
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("read the environment: %w", err)
	}
	for _, name := range k.Keys() { // sorted
		ld.set(envKeys[name], k.String(name), ConfigSource{Kind: SourceEnv, Name: name})
	}
	slices.Sort(ignored)
	return slices.Compact(ignored), nil
}

// describe writes a problem with the source of its key, and of the other
// keys it names when they were set somewhere.
func (ld *configLoader) describe(p problem) string {
	text := fmt.Sprintf("%s: %s: %s", ld.values[p.key].source, p.key, p.text)
	var also []string
	for _, key := range p.related {
		if v := ld.values[key]; v.source.Kind != SourceDefault {
			also = append(also, fmt.Sprintf("%s %s from %s", key, maskValue(key, formatValue(v.value)), v.source))
		}
	}
	if len(also) > 0 {
		text += " (" + strings.Join(also, ", ") + ")"
	}
	return text
}

// problem is a value that has the right type and still cannot run: key's
// value, what is wrong with it, and the other keys the text names.
type problem struct {
	key     string
	text    string
	related []string
}

// decodeValue turns raw — a value parsed from YAML, an environment
// variable's text or a flag's value — into a value of type t, or says in a
// sentence (after "key: ") why it cannot. Every source is read as text, so
// that each type is read alike from each.
func decodeValue(key string, t reflect.Type, raw any) (any, error) {
	if raw == nil {
		if t.Kind() == reflect.String {
			return "", nil // "read_url:" with nothing after it: empty
		}
		return nil, errors.New("has no value (remove the line to take the default)")
	}
	switch reflect.ValueOf(raw).Kind() {
	case reflect.Map:
		return nil, errors.New("is a section, not a single value")
	case reflect.Slice, reflect.Array:
		return nil, errors.New("is a list, not a single value")
	}
	text := fmt.Sprint(raw)
	if t.Kind() == reflect.String {
		return reflect.ValueOf(text).Convert(t).Interface(), nil // a number or a boolean where text is expected: its text
	}
	text = strings.TrimSpace(text)
	shown := strconv.Quote(maskValue(key, text))
	switch {
	case t == durationType:
		// A number alone is refused, wherever it comes from: YAML would
		// give 30 for "30", which as a time.Duration is 30 nanoseconds,
		// never what was meant. 0 needs no unit.
		if d, err := time.ParseDuration(text); err == nil {
			return d, nil
		}
		if _, err := strconv.ParseFloat(text, 64); err == nil {
			return nil, fmt.Errorf("%s is not a duration (write a unit: %ss)", shown, text)
		}
		return nil, fmt.Errorf("%s is not a duration (like 500ms, 30s, 2m, 1h)", shown)
	case t.Kind() == reflect.Bool:
		if b, err := strconv.ParseBool(text); err == nil {
			return b, nil
		}
		return nil, fmt.Errorf("%s is not true or false", shown)
	case t.Kind() == reflect.Float64:
		if f, err := strconv.ParseFloat(text, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, nil
		}
		return nil, fmt.Errorf("%s is not a number", shown)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if errors.Is(err, strconv.ErrRange) {
			return nil, fmt.Errorf("%s is too large", shown)
		}
		if err != nil {
			return nil, fmt.Errorf("%s is not a whole number", shown)
		}
		if reflect.Zero(t).OverflowInt(n) {
			return nil, fmt.Errorf("%s is too large (at most %d)", shown, int64(math.MaxInt64>>(64-t.Bits())))
		}
		return reflect.ValueOf(n).Convert(t).Interface(), nil
	}
	return nil, fmt.Errorf("has a type the configuration cannot hold (%s)", t)
}

// formatValue writes a value as the file or the environment would take it
// back, a duration the way config.yaml writes it (2m, not 2m0s).
func formatValue(v any) string {
	if d, ok := v.(time.Duration); ok {
		text := d.String()
		if strings.HasSuffix(text, "m0s") {
			text = strings.TrimSuffix(text, "0s")
		}
		if strings.HasSuffix(text, "h0m") {
			text = strings.TrimSuffix(text, "0m")
		}
		return text
	}
	return fmt.Sprint(v)
}
