package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// App is the web app the API serves beside itself, without authentication:
// a page and its files (the web package's). Its paths are routed to it one
// by one, so every other path keeps the API's JSON 404.
type App interface {
	http.Handler
	// Paths lists the paths the app answers GET and HEAD on.
	Paths() []string
}

// DevTokenTTL is how long a token from POST /dev/token is valid, as long as
// `newsfeed token`'s default.
const DevTokenTTL = 24 * time.Hour

// mountApp routes the app's paths to it, and, in development mode only,
// POST /dev/token.
func (s *Server) mountApp(e *echo.Echo) {
	if s.cfg.App != nil {
		h := echo.WrapHandler(s.cfg.App)
		for _, p := range s.cfg.App.Paths() {
			e.GET(p, h)
			e.HEAD(p, h)
		}
	}
	if s.cfg.DevTokens {
		e.POST("/dev/token", s.devToken, strictQuery)
	}
}

type devTokenRequest struct {
	UserID *int64 `json:"user_id"`
}

type devTokenResponse struct {
	Token  string `json:"token"`
	UserID int64  `json:"user_id"`
}

// devToken signs a token for any user who asks: the web app's sign-in by
// user id under --dev, where the secret is public anyway. It is never
// routed without Config.DevTokens.
func (s *Server) devToken(c echo.Context) error {
	var req devTokenRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	if req.UserID == nil || *req.UserID <= 0 {
		return invalidArgument("user_id must be a positive integer")
	}
	token, err := IssueToken(s.cfg.Secret, *req.UserID, DevTokenTTL)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, devTokenResponse{Token: token, UserID: *req.UserID})
}
