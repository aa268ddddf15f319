package events

// WaitHeader says how long the requester waits for the answer (a Go
// duration: "30s"): a handler that cannot do its work answers an error
// before then (eventbus.HandlerContext) instead of after the requester gave up.
const WaitHeader = "Gantry-Wait"
