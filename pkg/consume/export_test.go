package consume

// RefusedTotal is the refused-events counter, for the tests.
var RefusedTotal = refusedTotal
