package feed

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts live in lua/, one a file, each with its KEYS and ARGV
// described at its top; lua/common.lua is the prelude put before every
// script that changes a set, and says how they keep every feed and
// timeline a complete newest prefix of the truth.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// script loads lua/name.lua, after the prelude when withCommon is set.
func script(name string, withCommon bool) *redis.Script {
	src := mustRead(name)
	if withCommon {
		src = mustRead("common") + src
	}
	return redis.NewScript(src)
}

func mustRead(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("feed: " + err.Error()) // embedded at build time: cannot happen
	}
	return string(b)
}

var (
	appendScript         = script("append", true)
	spillScript          = script("spill", true)
	pushScript           = script("push", true)
	followScript         = script("follow", true)
	mergeScript          = script("merge", true)
	unfollowScript       = script("unfollow", true)
	hideScript           = script("hide", true)
	removeScript         = script("remove", true)
	finishRebuildScript  = script("finish_rebuild", true)
	abandonRebuildScript = script("abandon_rebuild", true)
	followsManyScript    = script("follows_many", true)
	readScript           = script("read", false)
	unlockScript         = script("unlock", false)
	unmarkDeleteScript   = script("unlock", false) // the same: delete the key if it holds ARGV[1]
)
