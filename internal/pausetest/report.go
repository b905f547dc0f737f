package pausetest

import "time"

// Outcomes of a run.
const (
	// OutcomePass: every check held; the kit writes a Result.
	OutcomePass = "pass"
	// OutcomeFail: a check failed or the test could not finish; no Result.
	OutcomeFail = "fail"
)

// Step statuses.
const (
	// StatusOK: the step did what a fenced resource must.
	StatusOK = "ok"
	// StatusFailed: the step showed the fence (or the run) failing.
	StatusFailed = "failed"
	// StatusSkipped: an earlier failure made the step impossible.
	StatusSkipped = "skipped"
)

// Step names, in the order they run.
const (
	// StepOtherKey: holder C acquires <key>-2 and keeps it.
	StepOtherKey = "other-key"
	// StepFirstWrite: holder A (a child process) acquires the key, writes
	// and releases it: the write must be accepted.
	StepFirstWrite = "first-write"
	// StepPrepare: holder A acquires the key again and prepares a write
	// (CanStart, the resource's Prepare or --check).
	StepPrepare = "prepare"
	// StepPause: holder A is stopped (SIGSTOP) until its hold ends.
	StepPause = "pause"
	// StepNextHolder: holder B acquires the key with a greater token and
	// writes: the write must be accepted.
	StepNextHolder = "next-holder"
	// StepReplay: B's token is presented again with another value: the
	// write must be rejected.
	StepReplay = "replay"
	// StepStaleWrite: holder A resumes and writes with its old token: the
	// write must be rejected.
	StepStaleWrite = "stale-write"
	// StepReadBack: the resource must hold B's value.
	StepReadBack = "read-back"
	// StepOtherRecord: holder C writes its own record with its older token:
	// the write must be accepted.
	StepOtherRecord = "other-record"
)

// Report is what a run found. Tokens appear in it because they are the
// test's own evidence; every hold of the test is released when the run
// ends, so they are no longer capabilities.
type Report struct {
	// Outcome is OutcomePass or OutcomeFail.
	Outcome string `json:"outcome"`
	// Message says in one sentence what passed, or what went wrong first.
	Message string `json:"message"`
	// Class is the class the test ran under, as lockd describes it.
	Class ClassInfo `json:"class"`
	// Resource is the class's spec.resource (the name the result records).
	Resource string `json:"resource"`
	// ResourceSchemaVersion is the schema version label given to the kit.
	ResourceSchemaVersion string `json:"resource_schema_version"`
	// Target describes what the kit wrote to (never credentials).
	Target string `json:"target"`
	// Key is the key holders A and B took.
	Key string `json:"key"`
	// OtherKey is holder C's key, Key + "-2".
	OtherKey string `json:"other_key"`
	// Tokens are the grants of the test.
	Tokens Tokens `json:"tokens"`
	// Steps are the checks, in the order they ran.
	Steps []Step `json:"steps"`
	// RanAt is when the run started.
	RanAt time.Time `json:"ran_at"`
}

// ClassInfo is the class as lockd serves it.
type ClassInfo struct {
	// Namespace and Name identify the class.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Enforcement is what the class declares: fenced or advisory.
	Enforcement string `json:"enforcement"`
	// Served is what lockd serves it as: a class declaring fenced is served
	// as advisory until a current result proves it.
	Served string `json:"served,omitempty"`
	// TTLSeconds is the class TTL: how long the paused holder keeps its hold.
	TTLSeconds float64 `json:"ttl_seconds"`
	// Resource is the class's spec.resource ("" when it names none).
	Resource string `json:"resource,omitempty"`
}

// Tokens are the test's grants, decimal strings in JSON; zero (omitted)
// when the run did not get that far.
type Tokens struct {
	// C is holder C's token on the other key: the oldest.
	C uint64 `json:"c,string,omitempty"`
	// AFirst is holder A's first grant, under which it wrote first.
	AFirst uint64 `json:"a_first,string,omitempty"`
	// A is holder A's second grant: the paused holder's token.
	A uint64 `json:"a,string,omitempty"`
	// B is the next holder's token.
	B uint64 `json:"b,string,omitempty"`
}

// Step is one check.
type Step struct {
	// Name is one of the Step… constants.
	Name string `json:"name"`
	// Status is StatusOK, StatusFailed or StatusSkipped.
	Status string `json:"status"`
	// Detail says what happened, in plain words.
	Detail string `json:"detail"`
}

// Passed reports whether every check held.
func (r *Report) Passed() bool { return r.Outcome == OutcomePass }

// Result returns the PauseTestResult of a passing run; ok is false for a
// failed one, which must not be recorded.
func (r *Report) Result() (res Result, ok bool) {
	if !r.Passed() {
		return Result{}, false
	}
	return Result{
		Namespace:             r.Class.Namespace,
		Class:                 r.Class.Name,
		Resource:              r.Resource,
		ResourceSchemaVersion: r.ResourceSchemaVersion,
		RanAt:                 r.RanAt.UTC().Truncate(time.Second),
		FirstToken:            r.Tokens.A,
		SecondToken:           r.Tokens.B,
	}, true
}

// step records a step; the first failure becomes the message.
func (r *Report) step(name, status, detail string) {
	r.Steps = append(r.Steps, Step{Name: name, Status: status, Detail: detail})
	if status == StatusFailed && r.Outcome != OutcomeFail {
		r.Outcome = OutcomeFail
		r.Message = detail
	}
}

// skip records every step of names that has not run as skipped.
func (r *Report) skip(why string, names ...string) {
	for _, n := range names {
		r.Steps = append(r.Steps, Step{Name: n, Status: StatusSkipped, Detail: why})
	}
}
