//go:build gate_broken_recovery

package arbiter

// brokenRecovery: this build is BROKEN ON PURPOSE (tag gate_broken_recovery).
// When quorum returns it grants classes open on quorum loss through etcd at
// once, while holders of its unprotected grants may still be acting on
// them: no open grace is compared and nothing is held back. The release
// gate builds lockd this way to show that its quorum-loss check catches a
// consensus grant overlapping an unprotected holder; never ship it.
const brokenRecovery = true
