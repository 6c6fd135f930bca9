package app

import (
	"net/url"
	"regexp"
	"strings"
)

// masked stands for a secret in what the configuration shows (`config
// check`, errors), as url.URL.Redacted writes a password.
const masked = "xxxxx"

// secretWords mark a secret by name: a key whose name holds one of them
// (auth.secret, admin.token, tracing.headers — which carry credentials to a
// collector) is shown masked whole, and so is such a parameter in a URL's
// query or a key=value connection string (password=…, sslpassword=…).
// The rule is by name, so that a key added later is masked without anyone
// remembering to list it.
var secretWords = []string{"secret", "token", "password", "passwd", "credential", "headers", "apikey", "api_key", "private_key"}

// isSecretName tells whether a key or parameter name says it holds a secret.
func isSecretName(name string) bool {
	name = strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

// dsnSecret finds secret parameters of a key=value connection string
// ("host=db user=app password='s3 cret'").
var dsnSecret = regexp.MustCompile(`(?i)\b(\w*(?:` + strings.Join(secretWords, "|") + `)\w*)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// maskValue returns a value of key as it may be shown: masked whole when the
// key's name says it is a secret; else with the password of a URL
// (postgres://app:xxxxx@db/newsfeed), its secret query parameters and the
// secret parameters of a key=value connection string masked. Every value of
// every key goes through it, whatever the key.
func maskValue(key, value string) string {
	if value == "" {
		return value
	}
	if isSecretName(key) {
		return masked
	}
	if strings.Contains(value, "://") {
		if u, err := url.Parse(value); err == nil {
			return maskURL(u)
		}
		return masked // a URL we cannot read may hide a password anywhere
	}
	return dsnSecret.ReplaceAllString(value, "${1}="+masked)
}

// maskURL writes u with its password and its secret query parameters
// masked, the other parameters as they were, in their order.
func maskURL(u *url.URL) string {
	if u.RawQuery != "" {
		params := strings.Split(u.RawQuery, "&")
		for i, p := range params {
			name, _, _ := strings.Cut(p, "=")
			if n, err := url.QueryUnescape(name); err == nil && isSecretName(n) {
				params[i] = name + "=" + masked
			}
		}
		u.RawQuery = strings.Join(params, "&")
	}
	return u.Redacted()
}
