package replicas

import "testing"

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"nf:feed:{42}":      "42",
		"nf:tickets:{3}":    "3",
		"nf:tickets":        "nf:tickets", // no tag: the whole key
		"nf:{}:x":           "nf:{}:x",    // an empty tag hashes the whole key
		"a{b}c{d}":          "b",          // the first tag
		"nf:{unclosed":      "nf:{unclosed",
		"nf:rate:posts:{7}": "7",
	} {
		if got := hashTag(key); got != want {
			t.Errorf("hashTag(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestListedReplicas(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=7004,state=online,offset=1,lag=0\r\n" +
		"slave1:ip=127.0.0.1,port=7005,state=wait_bgsave,offset=0,lag=0\r\n" +
		"master_failover_state:no-failover\r\nslave_read_repl_offset:1\r\n"
	if n := listedReplicas(info); n != 2 {
		t.Errorf("listedReplicas = %d, want 2 (a syncing replica counts)", n)
	}
	if n := listedReplicas("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"); n != 0 {
		t.Errorf("listedReplicas = %d, want 0", n)
	}
}
