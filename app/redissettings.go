package app

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/feed"
)

// redisSettingsGauge is newsfeed_redis_setting_expensive{setting}: 1 while
// some Redis node has a setting that makes a reader's data cost more than
// it must (feed.ServerSettings), 0 once every node was seen to be right.
func redisSettingsGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "newsfeed_redis_setting_expensive",
		Help: "1 when a Redis node has this setting below what stores a reader's data compactly (see the log), 0 when none does.",
	}, []string{"setting"})
	reg.MustRegister(g)
	return g
}

// checkRedisSettings reads the settings feed.ServerSettings names on every
// Redis node once Redis answers (it may be down at start: writes go on
// without it), raises them when redis.configure is set, and reports: one
// warning per setting that some node has the expensive way, naming the
// nodes and the fix, and the gauge. It returns when it has checked, or ctx
// ends.
func (s *System) checkRedisSettings(ctx context.Context) error {
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		checks, err := feed.CheckServer(ctx, s.Redis, s.Config.Redis.Configure)
		if err == nil {
			reportRedisSettings(s.Log, s.redisSettings, checks)
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// reportRedisSettings logs and exports what checkRedisSettings found.
func reportRedisSettings(log *zap.Logger, gauge *prometheus.GaugeVec, checks []feed.ServerCheck) {
	for _, setting := range feed.ServerSettings {
		var expensive, applied, unknown []string
		var have int
		for _, c := range checks {
			if c.Setting.Name != setting.Name {
				continue
			}
			switch {
			case c.Err != nil:
				unknown = append(unknown, c.Addr+": "+c.Err.Error())
			case c.Applied:
				applied = append(applied, c.Addr)
			case c.Expensive():
				expensive, have = append(expensive, c.Addr), c.Have
			}
		}
		if len(applied) > 0 {
			log.Info("Redis setting raised (redis.configure)", zap.String("setting", setting.Name),
				zap.Int("value", setting.Want), zap.String("nodes", strings.Join(applied, ", ")))
		}
		if len(unknown) > 0 {
			log.Info("Redis setting not checked: the node did not say or refused the change", zap.String("setting", setting.Name),
				zap.Strings("nodes", unknown))
		}
		if len(expensive) > 0 {
			log.Warn("Redis stores readers' data the expensive way: "+setting.Why+
				"; set redis.configure: true, or run CONFIG SET on each node (and put it in redis.conf)",
				zap.String("setting", setting.Name), zap.Int("have", have), zap.Int("want", setting.Want),
				zap.String("nodes", strings.Join(expensive, ", ")))
			gauge.WithLabelValues(setting.Name).Set(1)
		} else {
			gauge.WithLabelValues(setting.Name).Set(0)
		}
	}
}
