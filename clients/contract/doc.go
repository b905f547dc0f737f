// Package contract is the client contract suite: what every lockd holder
// library promises, written once and checked against a real lockd through
// a driver per language (godriver for pkg/client; clients/python's
// contract_driver.py for the Python client). Its tests are the suite:
//
//	go test ./clients/contract                                  # the Go and Python drivers
//	LOCKD_CONTRACT_DRIVERS=go go test ./clients/contract        # one of them
//
// TestContract/<driver>/<case> runs each case against each driver, each case
// with its own driver process; TestLateFenceControlFailsTheDeadlineCase runs
// the deadline case against the control (godriver -late-fence 2s, a
// library that fences as late as the old grace) and passes only when the
// case fails it.
//
// # The driver protocol
//
// A driver is a program that reads steps as JSON lines on stdin and writes
// one JSON line on stdout per step, in any order (it may run steps
// concurrently: a waiting acquire must not hold up a release), plus event
// lines. A step is {"id": N, "op": OP, ...}; its answer is
// {"id": N, "ok": true, "result": {...}} or {"id": N, "ok": false,
// "error": ERROR}. The suite names clients and locks; the driver keeps them
// by those names.
//
//	{"op":"open","client":C,"identity":SPIFFE_ID,"addr":HOST_PORT}  a client claiming the identity (insecure loopback)
//	{"op":"close","client":C}
//	{"op":"acquire","client":C,"lock":L,"key":K,"class":"","wait":SECONDS}
//	    -> {"token":"DECIMAL","epoch":N,"class":"ns/name","unprotected":B,"can_start":B,"remaining_ttl":SECONDS}
//	{"op":"release","lock":L}           -> {"held":B}   (did lockd still hold it when the last release reached it)
//	{"op":"can_start","lock":L}         -> {"value":B}
//	{"op":"remaining_ttl","lock":L}     -> {"seconds":S}
//	{"op":"state","lock":L}             -> {"state":"safe"|"jeopardy"|"ended","lost":LOST?}
//	{"op":"token","lock":L}             -> {"token":"DECIMAL","epoch":N}
//	{"op":"deadline","lock":L}          -> {"mono":S}   (the local deadline on the driver's monotonic clock)
//	{"op":"clock"}                      -> {"mono":S}   (the driver's monotonic clock, seconds from any origin)
//	{"op":"decode","reason":R,"code":GRPC_CODE_NAME,"message":M} -> {"error":ERROR}
//	    what the library makes of an error lockd answers with that reason ("" for none) and code
//	{"op":"quit"}
//
// ERROR is {"type": the library's error type or sentinel name, "kinds": every
// library error it matches, most specific first, "reason": lockd's reason
// as the library reports it, "definite": whether the library calls it a
// definite refusal (nothing changed) rather than an unknown outcome,
// "message"}. A type is named after its reason: with a prefix "Err" and a
// suffix "Error" removed and underscores and case ignored, the type of
// reason WAIT_TIMEOUT is WaitTimeout (Go: ErrWaitTimeout; Python:
// lockd.errors.WaitTimeout).
//
// The driver reports each lock's loss as it is told it, in on_fence:
//
//	{"event":"fenced","lock":L,"mono":S,"deadline":S,"can_start":B,"lost":LOST}
//
// with mono the driver's monotonic clock when on_fence ran and deadline the
// lock's local deadline on it. LOST is {"kind": "deadline" | "expired" |
// "forced" | "epoch" | "session_ended" | "lease_given_up" |
// "unprotected_ended" | "released" | "closed", "message", and for "forced"
// "requester", "approver" and "why"}. The suite maps the driver's clock onto
// its own with "clock" steps (taking the exchange with the shortest round
// trip), so a driver may use any monotonic clock: Go's time.Now readings,
// Python's time.monotonic, Java's System.nanoTime.
//
// Tokens are capabilities: a driver prints them only on its stdout to the
// suite, never in a log line or an error message, and the suite never
// prints them either.
package contract
