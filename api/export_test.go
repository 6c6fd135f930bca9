package api

import "time"

// SetStreamSettleAfter sets when a stream reads its feed again after it
// opens, in place of settleAfter (1 s and 5 s); none at all when settle is
// empty. The live tests turn these reads off: a post they bring would pass
// for one the live push brought.
func SetStreamSettleAfter(c *Config, settle ...time.Duration) {
	c.streamSettleAfter = append([]time.Duration{}, settle...)
}
