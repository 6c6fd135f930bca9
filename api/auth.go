package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"
)

var errUnauthenticated = newError(http.StatusUnauthorized, "unauthenticated", "missing or invalid bearer token")

const userIDKey = "newsfeed.user_id"

// authenticate requires an HS256 bearer token with a positive integer sub and
// an exp in the future, and puts the user id in the context.
func authenticate(secret []byte) echo.MiddlewareFunc {
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
	keyFunc := func(*jwt.Token) (any, error) { return secret, nil }
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			header := c.Request().Header.Get(echo.HeaderAuthorization)
			scheme, raw, ok := strings.Cut(header, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || raw == "" {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="newsfeed"`)
				return errUnauthenticated
			}
			var claims jwt.RegisteredClaims
			_, err := parser.ParseWithClaims(strings.TrimSpace(raw), &claims, keyFunc)
			id, subErr := parsePositive(claims.Subject)
			if err != nil || subErr != nil {
				c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="newsfeed", error="invalid_token"`)
				return errUnauthenticated
			}
			c.Set(userIDKey, id)
			return next(c)
		}
	}
}

func userID(c echo.Context) int64 {
	id, _ := c.Get(userIDKey).(int64)
	return id
}

// IssueToken signs a token for userID that expires after ttl.
func IssueToken(secret []byte, userID int64, ttl time.Duration) (string, error) {
	if userID <= 0 {
		return "", errors.New("user id must be positive")
	}
	if ttl <= 0 {
		return "", errors.New("ttl must be positive")
	}
	now := time.Now()
	claims := jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(userID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}
