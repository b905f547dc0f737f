//go:build !gate_broken_grant

package arbiter

// skipAbsenceCompare is true only in the release gate's deliberately broken
// build (tag gate_broken_grant), which drops the grant Txn's absence compare
// to prove the gate catches double grants. Never true in a real build.
const skipAbsenceCompare = false
