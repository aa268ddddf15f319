package gate

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
)

// A gate request that becomes runs every check through sudo as its user.
func TestGateBecomes(t *testing.T) {
	p := &probe{exits: []int{1, 0}}
	c, _ := fake(p, &eventbustest.MemoryOutbox{})
	g := request(10*time.Second, 3)
	g.Become, g.BecomeUser = true, "app"
	if err := c.Run(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	same(t, "checks became", p.become, []string{"app", "app"})
}
