//go:build gate_broken_grant

package arbiter

// skipAbsenceCompare: this build is BROKEN ON PURPOSE (tag gate_broken_grant).
// The grant Txn no longer checks that the key is free, so two holders can
// be granted at once. The release gate builds lockd this way to show that
// it catches the double grant; never ship it.
const skipAbsenceCompare = true
