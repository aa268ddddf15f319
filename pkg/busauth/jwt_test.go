package busauth

import (
	"os"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/jwt/v2"
)

// A user JWT travels in the CONNECT line, which nats-server refuses past
// max_control_line (4096 bytes by default) with "maximum control line
// exceeded". Every identity's must fit with room for the rest of the line
// (the nonce signature, connection name, version and options: about 250
// bytes). The planner's, the longest, is near it: a permission added to it
// may need another made shorter (a wildcard for a list).
func TestUserJWTsFitTheControlLine(t *testing.T) {
	const room = 3800
	k, err := LoadOrCreate(t.TempDir(), Admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.ServerConfig(ServerOptions{OperatorMode: true}); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(append([]events.Identity{}, events.Services...), events.People...) {
		b, err := os.ReadFile(k.CredsFile(id))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := jwt.ParseDecoratedJWT(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: user JWT %d bytes", id, len(tok))
		if len(tok) > room {
			t.Errorf("%s: user JWT of %d bytes: past %d, the CONNECT line may exceed nats-server's max_control_line", id, len(tok), room)
		}
	}
}
