package feed

// BuildingHead is what a rebuild writes in a set's head while it reads
// PostgreSQL, with a token of its own: tests write it to stand for another
// reader's rebuild, stuck or crashed.
func BuildingHead() []byte { return head{flags: flagBuilding, token: buildToken()}.value() }

// Settings is the configuration f runs with, its defaults filled in.
func (f *Feeds) Settings() Config { return f.cfg }
