package natsembed_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// client is one identity's connection, with the permission violations
// the server reported to it.
type client struct {
	id  events.Identity
	nc  *nats.Conn
	js  jetstream.JetStream
	mu  sync.Mutex
	bad []string
}

func (c *client) violated(subject string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.bad {
		if strings.Contains(e, `"`+subject+`"`) {
			return true
		}
	}
	return false
}

func (c *client) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.bad)
}

func connect(t *testing.T, ns *natstest.Server, id events.Identity) *client {
	c := &client{id: id}
	c.nc = ns.Connect(id, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			c.mu.Lock()
			c.bad = append(c.bad, err.Error())
			c.mu.Unlock()
		}
	}))
	c.js, _ = jetstream.New(c.nc)
	return c
}

// action is something a client tries; subject is what the server names
// when it refuses it.
type action struct {
	name    string
	allowed []events.Identity
	subject string
	do      func(ctx context.Context, c *client) error
}

func jsPublish(subject string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		_, err := c.js.Publish(ctx, subject, []byte(`{"forged":true}`))
		return err
	}
}

// kvPut and kvDelete publish the message a KV put or delete is, so the
// write itself is what the server judges (not the bucket lookup first).
func kvPut(bucket string) func(context.Context, *client) error {
	return jsPublish("$KV." + bucket + ".probe")
}

func kvDelete(bucket string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		m := nats.NewMsg("$KV." + bucket + ".probe")
		m.Header.Set("KV-Operation", "DEL")
		_, err := c.js.PublishMsg(ctx, m)
		return err
	}
}

func kvGet(bucket string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		kv, err := c.js.KeyValue(ctx, bucket)
		if err != nil {
			return err
		}
		if _, err = kv.Get(ctx, "seeded"); err != nil {
			return err
		}
		return nil
	}
}

func request(subject string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		m, err := c.nc.RequestWithContext(ctx, subject, []byte(`{}`))
		if err != nil {
			return err
		}
		if string(m.Data) != "answered" {
			return fmt.Errorf("reply %q", m.Data)
		}
		return nil
	}
}

func readEvents(ctx context.Context, c *client) error {
	cons, err := c.js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.AllHostLifecycle}})
	if err != nil {
		return err
	}
	_, err = cons.Next(jetstream.FetchMaxWait(time.Second))
	return err
}

// kvDirectGet reads a key with a direct get, and nothing else first.
func kvDirectGet(bucket string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		m, err := c.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_"+bucket+".$KV."+bucket+".seeded", nil)
		if err != nil {
			return err
		}
		if st := m.Header.Get("Status"); st != "" || string(m.Data) != "{}" {
			return fmt.Errorf("status %s: %q", st, m.Data)
		}
		return nil
	}
}

// streamInfo asks for a stream's info (its sizes).
func streamInfo(stream string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		_, err := c.js.Stream(ctx, stream)
		return err
	}
}

// purgeSubject purges one subject of a stream, as a prune removes a key.
func purgeSubject(stream, subject string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		_, err := eventbus.PurgeSubject(ctx, c.js, stream, subject)
		return err
	}
}

// deleteMsg deletes a message by sequence (one that is not there: the
// answer says so, and the permission is what is judged).
func deleteMsg(stream string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		m, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+stream, []byte(`{"seq":999999,"no_erase":true}`))
		if err != nil {
			return err
		}
		if d := string(m.Data); !strings.Contains(d, "no message found") && !strings.Contains(d, `"err_code":10057`) && !strings.Contains(d, `"success":true`) {
			return fmt.Errorf("reply %s", m.Data)
		}
		return nil
	}
}

// pullDurable asks a durable consumer for a message, as a pull does.
func pullDurable(stream, name string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		// A no-wait pull is answered at once (a message, or a status); now
		// and then one goes unanswered on a busy machine, so ask again
		// rather than wait out the action's whole deadline.
		var m *nats.Msg
		var err error
		for try := 0; try < 3; try++ {
			tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			m, err = c.nc.RequestWithContext(tctx, "$JS.API.CONSUMER.MSG.NEXT."+stream+"."+name, []byte(`{"batch":1,"no_wait":true}`))
			cancel()
			if err == nil || !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return err
		}
		if len(m.Data) == 0 && m.Header.Get("Status") != "" && m.Header.Get("Status") != "408" && m.Header.Get("Status") != "404" {
			return fmt.Errorf("status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
		}
		return nil
	}
}

func subscribe(subject string, want string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		sub, err := c.nc.SubscribeSync(subject)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		if err := c.nc.Flush(); err != nil {
			return err
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			_ = publishAsExecutor(want)
		}()
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			return err
		}
		if m.Subject != want {
			return fmt.Errorf("got %s", m.Subject)
		}
		return nil
	}
}

// publishAsExecutor is set by the test: an event published as the executor.
var publishAsExecutor func(subject string) error

var (
	services = events.Services
	everyone = append(slices.Clone(events.Services), events.People...)
	people   = events.People
)

func only(ids ...events.Identity) []events.Identity { return ids }

// TestEveryIdentity: each identity can do what it needs and the server
// refuses each forbidden action, for every identity, with the
// permissions gantry dev and compose run with.
func TestEveryIdentity(t *testing.T) {
	t.Run("nkeys", func(t *testing.T) { everyIdentity(t, natstest.Start(t)) })
	t.Run("operator mode", func(t *testing.T) {
		everyIdentity(t, natstest.StartWith(t, natsembed.Config{OperatorMode: true}))
	})
}

func everyIdentity(t *testing.T, ns *natstest.Server) {
	ctx := context.Background()
	admin, _ := jetstream.New(ns.Connect(busauth.Admin))
	for _, id := range services {
		if err := eventbus.Ensure(ctx, admin, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CreateOrUpdateConsumer(ctx, events.StreamDispatch, eventbus.ExecutorConsumer("eu-1")); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{events.BucketWorkflows, events.BucketRuns, events.BucketNodes, events.BucketState, events.BucketSlots} {
		kv, _ := admin.KeyValue(ctx, b)
		if _, err := kv.Put(ctx, "seeded", []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Publish(ctx, events.HostLifecycle("seed"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Publish(ctx, events.HostDispatch("seed", ""), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// Stand-ins for the planner's and state-store's endpoints, subscribed
	// as those services; the submit's stand-in passes on who submitted.
	submitter := make(chan events.Principal, 10)
	for id, subjects := range map[events.Identity][]string{
		events.Planner:    events.Uses(events.Planner).Serve,
		events.StateStore: events.Uses(events.StateStore).Serve,
	} {
		nc := ns.Connect(id)
		for _, s := range subjects {
			if _, err := nc.QueueSubscribe(s, "q", func(m *nats.Msg) {
				if m.Subject == events.SubjectSubmit {
					submitter <- events.PrincipalFrom(m.Header.Get(events.RequestInfoHeader))
				}
				_ = m.Respond([]byte("answered"))
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	exec := connect(t, ns, events.Executor)
	publishAsExecutor = func(s string) error { _, err := exec.js.Publish(ctx, s, []byte("{}")); return err }

	actions := []action{
		{"publish a host event", only(events.Planner, events.Executor), "decky.h.lifecycle", jsPublish("decky.h.lifecycle")},
		{"publish a workflow event", only(events.Planner), "workflow.w1.lifecycle", jsPublish("workflow.w1.lifecycle")},
		{"publish dispatch work", only(events.Planner), "decky.h.dispatch._", jsPublish("decky.h.dispatch._")},
		{"publish zoned dispatch work", only(events.Planner), "decky.h.dispatch.eu-1", jsPublish("decky.h.dispatch.eu-1")},
		{"publish gate work", only(events.Planner), "decky.h.gate", jsPublish("decky.h.gate")},
		{"publish a health result", only(events.HealthGate), "decky.h.health", jsPublish("decky.h.health")},
		{"publish output lines", only(events.Executor), "decky.h.logs.n", jsPublish("decky.h.logs.n")},
		{"put gantry_workflows", only(events.Planner), "$KV.gantry_workflows.probe", kvPut(events.BucketWorkflows)},
		{"put gantry_runs", only(events.Planner), "$KV.gantry_runs.probe", kvPut(events.BucketRuns)},
		{"put gantry_nodes", only(events.Executor), "$KV.gantry_nodes.probe", kvPut(events.BucketNodes)},
		{"put gantry_state", only(events.StateStore), "$KV.gantry_state.probe", kvPut(events.BucketState)},
		{"put gantry_slots", only(events.Executor), "$KV.gantry_slots.probe", kvPut(events.BucketSlots)},
		{"read gantry_slots", only(events.Executor), "$JS.API.STREAM.INFO.KV_gantry_slots", kvGet(events.BucketSlots)},
		{"delete from gantry_nodes", only(events.Executor), "$KV.gantry_nodes.probe", kvDelete(events.BucketNodes)},
		{"delete from gantry_state", only(events.StateStore), "$KV.gantry_state.probe", kvDelete(events.BucketState)},
		{"read gantry_runs", only(events.Planner, events.Executor, events.Operator, events.Viewer), "$JS.API.STREAM.INFO.KV_gantry_runs", kvGet(events.BucketRuns)},
		{"read gantry_state", only(events.StateStore), "$JS.API.DIRECT.GET.KV_gantry_state", kvDirectGet(events.BucketState)},
		{"size of gantry_state", only(events.StateStore, events.Operator), "$JS.API.STREAM.INFO.KV_gantry_state", streamInfo("KV_gantry_state")},
		{"size of gantry_nodes", only(events.Planner, events.Executor, events.StateStore, events.Operator), "$JS.API.STREAM.INFO.KV_gantry_nodes", streamInfo("KV_gantry_nodes")},
		{"read gantry_nodes", only(events.Planner, events.Executor, events.StateStore), "$JS.API.DIRECT.GET.KV_gantry_nodes", kvDirectGet(events.BucketNodes)},
		{"prune", only(events.Operator), events.SubjectPrune, request(events.SubjectPrune)},
		{"purge gantry_workflows by key", only(events.Planner), "$JS.API.STREAM.PURGE.KV_gantry_workflows", purgeSubject("KV_gantry_workflows", "$KV.gantry_workflows.probe")},
		{"purge gantry_runs by key", only(events.Planner), "$JS.API.STREAM.PURGE.KV_gantry_runs", purgeSubject("KV_gantry_runs", "$KV.gantry_runs.probe")},
		{"purge gantry_nodes by key", only(events.Executor), "$JS.API.STREAM.PURGE.KV_gantry_nodes", purgeSubject("KV_gantry_nodes", "$KV.gantry_nodes.probe")},
		{"purge gantry_state by key", only(events.StateStore), "$JS.API.STREAM.PURGE.KV_gantry_state", purgeSubject("KV_gantry_state", "$KV.gantry_state.probe")},
		{"delete an event", only(events.Planner), "$JS.API.STREAM.MSG.DELETE.GANTRY_EVENTS", deleteMsg(events.StreamEvents)},
		{"delete an output line", only(events.Executor), "$JS.API.STREAM.MSG.DELETE.GANTRY_LOGS", deleteMsg(events.StreamLogs)},
		{"create a stream", nil, "$JS.API.STREAM.CREATE.EVIL", func(ctx context.Context, c *client) error {
			_, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
			return err
		}},
		{"delete the dispatch stream", nil, "$JS.API.STREAM.DELETE.GANTRY_DISPATCH", func(ctx context.Context, c *client) error {
			return c.js.DeleteStream(ctx, events.StreamDispatch)
		}},
		{"purge the event stream", nil, "$JS.API.STREAM.PURGE.GANTRY_EVENTS", func(ctx context.Context, c *client) error {
			s, err := c.js.Stream(ctx, events.StreamEvents)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		}},
		{"delete the planner's consumer", nil, "$JS.API.CONSUMER.DELETE.GANTRY_EVENTS.planner", func(ctx context.Context, c *client) error {
			return c.js.DeleteConsumer(ctx, events.StreamEvents, events.ConsumerPlanner)
		}},
		{"delete the executor's consumer", nil, "$JS.API.CONSUMER.DELETE.GANTRY_DISPATCH.executor", func(ctx context.Context, c *client) error {
			return c.js.DeleteConsumer(ctx, events.StreamDispatch, events.ConsumerExecutor)
		}},
		{"take dispatch work", only(events.Executor), "$JS.API.CONSUMER.MSG.NEXT.GANTRY_DISPATCH.executor", pullDurable(events.StreamDispatch, events.ConsumerExecutor)},
		{"take a zone's dispatch work", only(events.Executor), "$JS.API.CONSUMER.MSG.NEXT.GANTRY_DISPATCH.executor-zone-eu-1", pullDurable(events.StreamDispatch, "executor-zone-eu-1")},
		{"see whether executors take a zone's dispatches", only(events.Planner, events.Executor), "$JS.API.CONSUMER.INFO.GANTRY_DISPATCH.executor-zone-eu-1", func(ctx context.Context, c *client) error {
			t, err := eventbus.ZoneTakers(ctx, c.js, "eu-1")
			if err == nil && !t.Exists {
				err = errors.New("the zone's consumer is there, but was not seen")
			}
			return err
		}},
		{"take the planner's events", only(events.Planner), "$JS.API.CONSUMER.MSG.NEXT.GANTRY_EVENTS.planner", pullDurable(events.StreamEvents, events.ConsumerPlanner)},
		{"read the event stream", only(events.Planner, events.StateStore, events.Operator, events.Viewer), "$JS.API.CONSUMER.CREATE.GANTRY_EVENTS", readEvents},
		{"submit", only(events.Operator), events.SubjectSubmit, request(events.SubjectSubmit)},
		{"validate", only(events.Operator), events.SubjectValidate, request(events.SubjectValidate)},
		{"cancel", only(events.Operator), "workflow.w1.cancel", request("workflow.w1.cancel")},
		{"retry", only(events.Operator), "workflow.w1.retry", request("workflow.w1.retry")},
		{"read state", only(events.Operator, events.Viewer), events.StateList, request(events.StateList)},
		{"read state again of every replica", only(events.Operator, events.Viewer), events.StateRetry(events.StateList), request(events.StateRetry(events.StateList))},
		{"rebuild state", only(events.Operator), events.StateRebuild, request(events.StateRebuild)},
		{"watch host events", only(events.Operator, events.Viewer), "decky.*.lifecycle", subscribe("decky.*.lifecycle", "decky.watched.lifecycle")},
	}
	for _, id := range everyone {
		t.Run(string(id), func(t *testing.T) {
			c := connect(t, ns, id)
			for _, a := range actions {
				allowed := slices.Contains(a.allowed, id)
				ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				done := make(chan error, 1)
				go func() { done <- a.do(ctx, c) }()
				if allowed {
					if err := <-done; err != nil {
						t.Errorf("%s: allowed, but failed: %v (violations: %v)", a.name, err, c.violations())
					}
				} else if !waitViolation(ctx, c, a.subject, done) {
					t.Errorf("%s: forbidden, but the server did not refuse %s", a.name, a.subject)
				}
				cancel()
			}
			if !slices.ContainsFunc(actions, func(a action) bool { return slices.Contains(a.allowed, id) }) {
				t.Errorf("%s may do nothing", id)
			}
		})
	}
	// The operator's submit reached the planner with the operator's
	// identity, set by the server (in operator mode, with its JWT's name).
	select {
	case who := <-submitter:
		pub, _ := ns.Keys.Public(events.Operator)
		want := events.Principal{Account: events.AccountClients, User: pub, Attested: true}
		if _, err := os.Stat(ns.Keys.CredsFile(events.Operator)); err == nil {
			// Operator mode names the user from its JWT, and the
			// account by its public key.
			want.Name = "operator"
			if strings.HasPrefix(who.Account, "A") && len(who.Account) == 56 {
				want.Account = who.Account
			}
		}
		if who != want {
			t.Errorf("submitted by %+v, want %+v", who, want)
		}
	default:
		t.Error("no submit reached the planner")
	}
	// Nothing forbidden took effect.
	for _, s := range []string{events.StreamDispatch, events.StreamEvents} {
		st, err := admin.Stream(ctx, s)
		if err != nil {
			t.Fatalf("%s after the refused deletes and purges: %v", s, err)
		}
		if st.CachedInfo().State.Msgs == 0 {
			t.Errorf("%s was emptied", s)
		}
	}
	for _, name := range []string{events.ConsumerPlanner} {
		if _, err := admin.Consumer(ctx, events.StreamEvents, name); err != nil {
			t.Errorf("consumer %s: %v", name, err)
		}
	}
	if _, err := admin.Stream(ctx, "EVIL"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream EVIL: %v, want not found", err)
	}
}

// waitViolation waits until the server reports a violation naming subject
// (a prefix for consumer creates, whose names are random), or the action
// ends or times out.
func waitViolation(ctx context.Context, c *client, subject string, done <-chan error) bool {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if c.violated(subject) || c.violatedPrefix(subject) {
			return true
		}
		select {
		case <-ctx.Done():
			return c.violated(subject) || c.violatedPrefix(subject)
		case <-tick.C:
		}
	}
}

func (c *client) violatedPrefix(prefix string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.bad {
		if strings.Contains(e, `"`+prefix+`.`) {
			return true
		}
	}
	return false
}

// A service started with another identity's credentials stops with an
// error that says so, not only a timeout.
func TestWrongIdentityIsNamed(t *testing.T) {
	ns := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := eventbus.Open(ctx, ns.Connect(events.Executor), events.Planner, 1, nil)
	if !errors.Is(err, eventbus.ErrRefused) || !strings.Contains(err.Error(), "planner identity") {
		t.Fatalf("planner opened as the executor: %v", err)
	}
}
