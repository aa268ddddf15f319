package events

import (
	"encoding/json"
	"slices"
	"strings"
)

// Who may do what on the bus. Every identity's permissions are derived
// here from what it uses of the topology above (its streams, consumers,
// buckets and subjects), so a subject, stream or bucket added to a
// service's Usage gets its permission in the same change, and one that no
// identity uses is caught by a test.

// Identity names one kind of NATS user.
type Identity string

// The identities: the four services, and the two kinds of people.
const (
	Planner    Identity = "planner"
	Executor   Identity = "executor"
	HealthGate Identity = "health-gate"
	StateStore Identity = "state-store"
	Operator   Identity = "operator" // people and CI: submit, control, read
	Viewer     Identity = "viewer"   // read events, logs and state
)

// Services are the identities of gantry's own processes.
var Services = []Identity{Planner, Executor, HealthGate, StateStore}

// People are the identities of clients.
var People = []Identity{Operator, Viewer}

// Accounts. The services and every stream live in AccountServices; people
// connect to AccountClients, which imports what they may use. A request
// that crosses from one to the other carries the requester's identity in
// the Nats-Request-Info header, set by the server: that is how the planner
// knows who submitted (see RequestInfoHeader).
const (
	AccountServices = "GANTRY"
	AccountClients  = "GANTRY_CLIENTS"
)

// RequestInfoHeader is the header the NATS server adds to a request that
// crosses accounts through a service import shared with details: the
// requester's account, user (public nkey) and, with JWT auth, name.
const RequestInfoHeader = "Nats-Request-Info"

// Account is the account an identity belongs to.
func (id Identity) Account() string {
	if slices.Contains(People, id) {
		return AccountClients
	}
	return AccountServices
}

// InboxPrefix is the prefix of an identity's reply subjects. Services each
// get their own, so one service cannot read another's replies. Operators
// get theirs too: the replies to what only they may do (a submit's plan
// holds every rendered command) never reach a viewer. Viewers keep the
// _INBOX that nats tools use by default, and so may operators for their
// other requests (PeopleInbox).
func (id Identity) InboxPrefix() string {
	if id == Viewer {
		return PeopleInbox
	}
	return "_INBOX_" + strings.ReplaceAll(string(id), "-", "_")
}

// PeopleInbox is the reply prefix every person may subscribe to.
const PeopleInbox = "_INBOX"

// Durable names a durable consumer on a stream.
type Durable struct{ Stream, Name string }

// Usage is what one service uses of the bus.
type Usage struct {
	Publish   []string  // subjects it publishes on (events, work, KV writes are in Write)
	Subscribe []string  // core subscriptions
	Serve     []string  // micro endpoint subjects it answers
	Streams   []string  // streams it creates when missing (every one it publishes to or reads)
	Consumes  []Durable // durable consumers it creates and pulls from
	// Durables are streams on which it creates and pulls durable
	// consumers named at run time (the executors of a zone).
	Durables []string
	Follows  []string // streams it reads with ordered (ephemeral) consumers
	// Inspects are streams whose durable consumers' state it reads
	// (consumer info only, not their messages): the planner sees whether
	// any executor takes a zone's dispatches.
	Inspects []string
	Read     []string // KV buckets it reads
	Write    []string // KV buckets it writes (and reads)
	// ByKey are buckets of Read and Write it only gets and puts by key,
	// never lists: it needs no consumers on them.
	ByKey  []string
	Retire []Durable // retired durable consumers it deletes
	// Checks are streams it reads single messages of, by subject, from
	// their leader: the ones its events go to, to find whether an event
	// whose acknowledgement never came was stored (see eventbus.ClockSkew).
	Checks []string
	// Prune are the buckets and streams it removes a pruned workflow's
	// data from: a bucket's keys by a purge of its stream by subject, a
	// stream's messages one by one by sequence. Each is what the service
	// itself writes (GANTRY_EVENTS, written by several, is the planner's
	// to prune: see docs/operations.md).
	Prune []string
}

// Uses returns what a service uses. People use nothing directly: their
// permissions are the imports of AccountClients.
func Uses(id Identity) Usage {
	switch id {
	case Planner:
		return Usage{
			Publish:  []string{AllWorkflowLifecycle, AllHostLifecycle, AllDispatch, AllGate},
			Serve:    []string{SubjectSubmit, SubjectValidate, SubjectPrune, "workflow.*." + VerbCancel, "workflow.*." + VerbPause, "workflow.*." + VerbResume, "workflow.*." + VerbRetry, StatusSubject(Planner)},
			Streams:  []string{StreamEvents, StreamDispatch, StreamGates},
			Consumes: []Durable{{StreamEvents, ConsumerPlanner}},
			Follows:  []string{StreamEvents}, // a pruned workflow's events, found by reading
			Inspects: []string{StreamDispatch},
			Checks:   []string{StreamEvents},
			Read:     []string{BucketNodes},
			Write:    []string{BucketWorkflows, BucketRuns},
			Prune:    []string{BucketWorkflows, BucketRuns, StreamEvents},
		}
	case Executor:
		return Usage{
			Publish:   []string{AllHostLifecycle, AllLogs},
			Subscribe: []string{AllWorkflowLifecycle},
			Serve:     []string{StatusSubject(Executor)},
			Streams:   []string{StreamEvents, StreamDispatch, StreamLogs},
			Consumes:  []Durable{{StreamDispatch, ConsumerExecutor}},
			Durables:  []string{StreamDispatch},
			Follows:   []string{StreamLogs}, // a pruned workflow's output lines, found by reading
			Checks:    []string{StreamEvents},
			Read:      []string{BucketRuns},
			Write:     []string{BucketNodes, BucketSlots, BucketOutputs},
			ByKey:     []string{BucketOutputs},
			Prune:     []string{BucketNodes, StreamLogs},
		}
	case HealthGate:
		return Usage{
			Publish:   []string{AllHealth},
			Subscribe: []string{AllWorkflowLifecycle}, // a cancel stops the workflow's gates
			Serve:     []string{StatusSubject(HealthGate)},
			Streams:   []string{StreamEvents, StreamGates},
			Consumes:  []Durable{{StreamGates, ConsumerHealthGate}},
			Checks:    []string{StreamEvents},
			Read:      []string{BucketOutputs}, // the outputs its checks read
			ByKey:     []string{BucketOutputs},
		}
	case StateStore:
		return Usage{
			Serve:   append([]string{StateWorkflow, StateList, StateHost, StateDrift, StateRebuild, StatusSubject(StateStore)}, stateRetries()...),
			Streams: []string{StreamEvents},
			Follows: []string{StreamEvents},
			// The executors' node records, which a rebuild's check holds
			// the stream against (read only: what runs is not its to
			// decide).
			Read:   []string{BucketNodes},
			Write:  []string{BucketState},
			Retire: []Durable{{StreamEvents, "state-store"}},
			Prune:  []string{BucketState},
		}
	}
	return Usage{}
}

// stateRetries are the retry subjects of the state reads (StateRetry).
func stateRetries() []string {
	var out []string
	for _, s := range StateReads {
		out = append(out, StateRetry(s))
	}
	return out
}

// Import is one subject AccountClients imports from AccountServices.
type Import struct {
	Subject string
	Service bool // request/reply (else a stream of messages)
	// Share passes the requester's identity to the service in the
	// Nats-Request-Info header.
	Share bool
	// Multiple is set for a service that answers a request with more than
	// one message (micro discovery, JetStream pulls).
	Multiple bool
}

// ClientImports is everything people can reach: the events, logs and
// health results as streams; the services' endpoints, status ones
// included (shared, for the audit); micro discovery; and the JetStream API
// calls that reading the event and log streams (ordered consumers: the
// history of what they could have watched live) and the run snapshots
// takes. Nothing
// else of AccountServices is visible to them, in particular no dispatch
// or gate work, no KV write and no stream or consumer management.
func ClientImports() []Import {
	var im []Import
	for _, s := range []string{AllWorkflowLifecycle, AllHostLifecycle, AllHealth, AllLogs} {
		im = append(im, Import{Subject: s})
	}
	for _, id := range Services {
		for _, s := range Uses(id).Serve {
			im = append(im, Import{Subject: s, Service: true, Share: true})
		}
	}
	im = append(im, Import{Subject: "$SRV.>", Service: true, Multiple: true})
	im = append(im, Import{Subject: "$JS.API.INFO", Service: true})
	for _, st := range []string{StreamEvents, StreamLogs} {
		for _, s := range readerAPI(st) {
			im = append(im, Import{Subject: s, Service: true, Multiple: strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT.")})
		}
	}
	for _, s := range kvReadAPI(BucketRuns) {
		im = append(im, Import{Subject: s, Service: true})
	}
	for _, s := range SizeInfoAPI() {
		if !slices.ContainsFunc(im, func(i Import) bool { return i.Subject == s }) {
			im = append(im, Import{Subject: s, Service: true})
		}
	}
	return im
}

// SizedStores are the streams and buckets whose sizes gantry prune
// --dry-run shows, before and after.
var SizedStores = []string{StreamEvents, StreamLogs, BucketWorkflows, BucketRuns, BucketNodes, BucketState}

// StoreStream is the stream of a store of SizedStores: itself, or the
// stream behind a bucket.
func StoreStream(store string) string {
	if strings.HasPrefix(store, "gantry_") {
		return KVStream(store)
	}
	return store
}

// SizeInfoAPI is what an operator asks for the sizes of SizedStores:
// each stream's info (its configuration and counts, none of its
// messages).
func SizeInfoAPI() []string {
	var out []string
	for _, st := range SizedStores {
		out = append(out, "$JS.API.STREAM.INFO."+StoreStream(st))
	}
	return out
}

// Permissions are a NATS user's subject permissions.
type Permissions struct {
	PublishAllow   []string `json:"publish_allow"`
	PublishDeny    []string `json:"publish_deny,omitempty"`
	SubscribeAllow []string `json:"subscribe_allow"`
	SubscribeDeny  []string `json:"subscribe_deny,omitempty"`
	// Respond lets the user answer requests (the reply subject is not
	// otherwise allowed): the services that serve endpoints.
	Respond bool `json:"respond,omitempty"`
}

// PermissionsFor derives an identity's permissions.
func PermissionsFor(id Identity) Permissions {
	switch id {
	case Operator, Viewer:
		return peoplePermissions(id)
	}
	return servicePermissions(id, Uses(id))
}

func peoplePermissions(id Identity) Permissions {
	p := Permissions{
		PublishAllow: append([]string{StateWorkflow, StateList, StateHost, StateDrift, "$SRV.>", "$JS.API.INFO"}, stateRetries()...),
		// The imports are the hard edge: nothing else of AccountServices is
		// reachable. These denies say the same inside AccountClients, so no
		// client can publish what looks like an event or work to another.
		PublishDeny: []string{"decky.>", AllWorkflowLifecycle, "$KV.>", "$JS.ACK.>",
			"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>",
			"$JS.API.STREAM.MSG.DELETE.>", "$JS.API.CONSUMER.DELETE.>", "$JS.API.CONSUMER.DURABLE.>"},
		SubscribeAllow: dedupe([]string{PeopleInbox + ".>", id.InboxPrefix() + ".>", "decky.>", AllWorkflowLifecycle}),
	}
	for _, id := range Services { // every status endpoint: read-only
		p.PublishAllow = append(p.PublishAllow, StatusSubject(id))
	}
	p.PublishAllow = append(p.PublishAllow, readerAPI(StreamEvents)...)
	p.PublishAllow = append(p.PublishAllow, readerAPI(StreamLogs)...)
	p.PublishAllow = append(p.PublishAllow, kvReadAPI(BucketRuns)...)
	p.PublishDeny = append(p.PublishDeny, durableDenies(StreamEvents, "")...)
	if id == Operator {
		p.PublishAllow = append(p.PublishAllow, SubjectSubmit, SubjectValidate, SubjectPrune, StateRebuild)
		p.PublishAllow = append(p.PublishAllow, SizeInfoAPI()...)
		for _, v := range []string{VerbCancel, VerbPause, VerbResume, VerbRetry} {
			p.PublishAllow = append(p.PublishAllow, WorkflowControl("*", v))
		}
	}
	p.PublishAllow = dedupe(p.PublishAllow)
	return p
}

func servicePermissions(id Identity, u Usage) Permissions {
	p := Permissions{
		PublishAllow:   []string{"$JS.API.INFO"},
		SubscribeAllow: []string{id.InboxPrefix() + ".>"},
		Respond:        len(u.Serve) > 0,
	}
	p.PublishAllow = append(p.PublishAllow, u.Publish...)
	p.SubscribeAllow = append(p.SubscribeAllow, u.Subscribe...)
	if len(u.Serve) > 0 {
		p.SubscribeAllow = append(p.SubscribeAllow, u.Serve...)
		p.SubscribeAllow = append(p.SubscribeAllow, discovery(id)...)
	}
	for _, s := range u.Streams {
		p.PublishAllow = append(p.PublishAllow, streamEnsureAPI(s)...)
	}
	for _, d := range u.Consumes {
		if slices.Contains(u.Follows, d.Stream) {
			// Reading the stream takes its consumers by any name; only the
			// acknowledgements are the durable's own.
			p.PublishAllow = append(p.PublishAllow, "$JS.ACK."+d.Stream+"."+d.Name+".>")
			continue
		}
		p.PublishAllow = append(p.PublishAllow,
			"$JS.API.CONSUMER.CREATE."+d.Stream+"."+d.Name,
			"$JS.API.CONSUMER.CREATE."+d.Stream+"."+d.Name+".>",
			"$JS.API.CONSUMER.INFO."+d.Stream+"."+d.Name,
			"$JS.API.CONSUMER.MSG.NEXT."+d.Stream+"."+d.Name,
			"$JS.ACK."+d.Stream+"."+d.Name+".>")
	}
	for _, s := range u.Durables {
		p.PublishAllow = append(p.PublishAllow,
			"$JS.API.CONSUMER.CREATE."+s+".*",
			"$JS.API.CONSUMER.CREATE."+s+".*.>",
			"$JS.API.CONSUMER.INFO."+s+".*",
			"$JS.API.CONSUMER.MSG.NEXT."+s+".*",
			"$JS.ACK."+s+".>")
	}
	for _, s := range u.Follows {
		p.PublishAllow = append(p.PublishAllow, readerAPI(s)...)
		p.PublishAllow = append(p.PublishAllow, "$JS.API.CONSUMER.DELETE."+s+".*")
		own := ""
		for _, d := range u.Consumes {
			if d.Stream == s {
				own = d.Name
				// It deletes the consumers it reads with, not its durable.
				p.PublishDeny = append(p.PublishDeny, "$JS.API.CONSUMER.DELETE."+s+"."+own)
			}
		}
		p.PublishDeny = append(p.PublishDeny, durableDenies(s, own)...)
	}
	for _, s := range u.Prune {
		if slices.Contains(BucketNames, s) {
			p.PublishAllow = append(p.PublishAllow, "$JS.API.STREAM.PURGE."+KVStream(s))
		} else {
			p.PublishAllow = append(p.PublishAllow, "$JS.API.STREAM.MSG.DELETE."+s)
		}
	}
	for _, d := range u.Retire {
		p.PublishAllow = append(p.PublishAllow, "$JS.API.CONSUMER.DELETE."+d.Stream+"."+d.Name)
	}
	for _, s := range u.Inspects {
		p.PublishAllow = append(p.PublishAllow, "$JS.API.CONSUMER.INFO."+s+".*")
	}
	for _, s := range u.Checks {
		p.PublishAllow = append(p.PublishAllow, "$JS.API.STREAM.MSG.GET."+s)
	}
	read := func(b string) []string {
		if slices.Contains(u.ByKey, b) {
			return kvGetAPI(b)
		}
		return kvReadAPI(b)
	}
	for _, b := range u.Read {
		p.PublishAllow = append(p.PublishAllow, kvEnsureAPI(b)...)
		p.PublishAllow = append(p.PublishAllow, read(b)...)
	}
	for _, b := range u.Write {
		p.PublishAllow = append(p.PublishAllow, kvEnsureAPI(b)...)
		p.PublishAllow = append(p.PublishAllow, read(b)...)
		p.PublishAllow = append(p.PublishAllow, "$KV."+b+".>")
	}
	p.PublishAllow = dropCovered(joinWildcards(dedupe(p.PublishAllow)))
	p.PublishDeny = dedupe(p.PublishDeny)
	return p
}

// dropCovered leaves out the subjects that another of allow covers (a
// durable's own CREATE under the CREATE of every consumer of its stream):
// the same permissions, in fewer bytes of user JWT.
func dropCovered(allow []string) []string {
	out := make([]string, 0, len(allow))
	for i, s := range allow {
		if !slices.ContainsFunc(allow, func(p string) bool { return p != s && covers(p, s) }) || slices.Index(allow, s) != i {
			out = append(out, s)
		}
	}
	return out
}

// covers says whether subject pattern p matches every subject s does.
func covers(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, t := range pt {
		switch {
		case t == ">":
			return i < len(st)
		case i >= len(st):
			return false
		case t == "*" && st[i] != ">":
		case t != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}

// joinWildcards writes "X.*" and "X.*.>" as the one "X.>" that means the
// same: a service's permissions travel in its user JWT, which must fit
// the CONNECT line (see busauth's TestUserJWTsFitTheControlLine).
func joinWildcards(allow []string) []string {
	out := make([]string, 0, len(allow))
	for _, s := range allow {
		if base, ok := strings.CutSuffix(s, ".*.>"); ok && slices.Contains(allow, base+".*") {
			continue
		}
		if base, ok := strings.CutSuffix(s, ".*"); ok && slices.Contains(allow, s+".>") {
			s = base + ".>"
		}
		out = append(out, s)
	}
	return out
}

// discovery is what a micro service subscribes to: the discovery
// requests to every service ($SRV.PING, $SRV.INFO, $SRV.STATS: $SRV.*)
// and those to its own name (and instance id), not another service's.
// Three wildcards rather than nine subjects: a user JWT travels in the
// CONNECT line, which nats-server bounds (max_control_line, 4 KiB).
func discovery(id Identity) []string {
	return []string{"$SRV.*", "$SRV.*." + id.ServiceName(), "$SRV.*." + id.ServiceName() + ".*"}
}

// KVStream is the stream behind a KV bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

func streamEnsureAPI(stream string) []string {
	return []string{"$JS.API.STREAM.CREATE." + stream, "$JS.API.STREAM.UPDATE." + stream, "$JS.API.STREAM.INFO." + stream}
}

func kvEnsureAPI(bucket string) []string { return streamEnsureAPI(KVStream(bucket)) }

// readerAPI is what reading a stream with an ordered consumer takes:
// stream info, creating, reading and pulling ephemeral consumers, and
// single-message gets from the stream's leader (the last message on a
// subject: has a feed read all there is).
func readerAPI(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".*",
		"$JS.API.CONSUMER.CREATE." + stream + ".*.>",
		"$JS.API.CONSUMER.INFO." + stream + ".*",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.API.STREAM.MSG.GET." + stream,
	}
}

// kvReadAPI is what reading a bucket takes: info, direct and stored gets,
// and the ordered push consumer that lists keys (with its flow control).
func kvReadAPI(bucket string) []string {
	s := KVStream(bucket)
	return []string{
		"$JS.API.STREAM.INFO." + s,
		"$JS.API.DIRECT.GET." + s + ".>",
		"$JS.API.STREAM.MSG.GET." + s,
		"$JS.API.CONSUMER.CREATE." + s + ".>",
		"$JS.API.CONSUMER.DELETE." + s + ".*",
		"$JS.FC." + s + ".>",
	}
}

// kvGetAPI is what getting a bucket's records by key takes: info, direct
// and stored gets.
func kvGetAPI(bucket string) []string { return kvReadAPI(bucket)[:3] }

// durableDenies keeps a reader of stream off its durable consumers (other
// than own): it may not create, pull from or delete them under their names.
func durableDenies(stream, own string) []string {
	var deny []string
	for _, name := range Durables(stream) {
		if name == own {
			continue
		}
		deny = append(deny,
			"$JS.API.CONSUMER.CREATE."+stream+"."+name,
			"$JS.API.CONSUMER.CREATE."+stream+"."+name+".>",
			"$JS.API.CONSUMER.MSG.NEXT."+stream+"."+name,
			"$JS.API.CONSUMER.DELETE."+stream+"."+name)
	}
	for _, id := range Services {
		for _, d := range Uses(id).Retire {
			if d.Stream == stream && d.Name != own {
				deny = append(deny, "$JS.API.CONSUMER.CREATE."+d.Stream+"."+d.Name, "$JS.API.CONSUMER.CREATE."+d.Stream+"."+d.Name+".>", "$JS.API.CONSUMER.MSG.NEXT."+d.Stream+"."+d.Name)
			}
		}
	}
	slices.Sort(deny)
	return deny
}

func dedupe(s []string) []string {
	out := make([]string, 0, len(s))
	seen := map[string]bool{}
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// Principal is who made a request, as the NATS server authenticated them:
// read from the Nats-Request-Info header the server sets on a request that
// crosses into AccountServices (a client's own header of that name is
// replaced by the server's), never from a field the client fills in.
type Principal struct {
	Account string `json:"account"`
	User    string `json:"user,omitempty"` // the user's public nkey
	Name    string `json:"name,omitempty"` // the user JWT's name, with JWT (nsc) credentials
	// Attested is false when the request carried no server-set identity:
	// it did not cross accounts (a single-account deployment).
	Attested bool `json:"attested"`
}

// PrincipalFrom reads the Nats-Request-Info header value.
func PrincipalFrom(requestInfo string) Principal {
	var ci struct {
		Account string `json:"acc"`
		User    string `json:"user"`
		NameTag string `json:"name_tag"`
	}
	if requestInfo == "" || json.Unmarshal([]byte(requestInfo), &ci) != nil || ci.Account == "" {
		return Principal{}
	}
	return Principal{Account: ci.Account, User: ci.User, Name: ci.NameTag, Attested: true}
}

// Display is who this is for people: the identity's name (operator,
// a creds file's user name) when known, else the user's public key and
// account, or "unattested". String and the JSON keep the key.
func (p Principal) Display() string {
	switch {
	case !p.Attested:
		return "unattested"
	case p.Name != "":
		return p.Name
	case p.User != "":
		return p.User + " in " + p.Account
	}
	return "? in " + p.Account
}

// String is "name (user, account)", the user's key, or "unattested".
func (p Principal) String() string {
	if !p.Attested {
		return "unattested"
	}
	who := p.User
	if p.Name != "" {
		who = p.Name + " (" + p.User + ")"
	}
	if who == "" {
		who = "?"
	}
	return who + " in " + p.Account
}
