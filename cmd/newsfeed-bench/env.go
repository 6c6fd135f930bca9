package main

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/newsfeed/newsfeed/app"
)

// workerEnv is the environment of a newsfeed process of the bench (migrate,
// work): environ without its NEWSFEED_ variables, then every key of cfg as
// NEWSFEED_<KEY>, and the bench's overrides, so that the child runs with
// exactly the parent's effective configuration and needs no file.
func workerEnv(environ []string, cfg *app.Config) []string {
	env := make([]string, 0, len(environ)+64)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "NEWSFEED_") {
			env = append(env, kv)
		}
	}
	set := map[string]string{}
	var keys []string
	put := func(key, value string) {
		name := "NEWSFEED_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
		if _, ok := set[name]; !ok {
			keys = append(keys, name)
		}
		set[name] = value
	}
	flattenConfig(reflect.ValueOf(cfg).Elem(), "", put)
	for _, f := range benchOverrides() {
		put(f.Key, fmt.Sprint(f.Value))
	}
	sort.Strings(keys)
	for _, name := range keys {
		env = append(env, name+"="+set[name])
	}
	return env
}

var durationType = reflect.TypeFor[time.Duration]()

// flattenConfig calls put with every key of an app.Config (by its koanf
// tags) and its value as app.LoadConfig reads it back from the environment.
func flattenConfig(v reflect.Value, prefix string, put func(key, value string)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		key, fv := prefix+tag, v.Field(i)
		switch {
		case fv.Type() == durationType:
			put(key, time.Duration(fv.Int()).String())
		case fv.Kind() == reflect.Struct:
			flattenConfig(fv, key+".", put)
		case fv.Kind() == reflect.String:
			put(key, fv.String())
		case fv.Kind() == reflect.Bool:
			put(key, strconv.FormatBool(fv.Bool()))
		case fv.CanInt():
			put(key, strconv.FormatInt(fv.Int(), 10))
		case fv.CanUint():
			put(key, strconv.FormatUint(fv.Uint(), 10))
		case fv.CanFloat():
			put(key, strconv.FormatFloat(fv.Float(), 'g', -1, 64))
		default:
			put(key, fmt.Sprint(fv.Interface()))
		}
	}
}
