//go:build gate_broken_release

package arbiter

// releaseByKey: this build is BROKEN ON PURPOSE (tag gate_broken_release). A
// release compares only that the hold is on the session, not the hold's
// revision (the token), so a release retried after its answer was lost frees
// the same session's newer grant of the key (etcd#22082's shape). The
// release gate builds lockd this way to show that it catches it; never ship
// it.
const releaseByKey = true
