//go:build gate_broken_open

package arbiter

// brokenOpenAll: this build is BROKEN ON PURPOSE (tag gate_broken_open).
// In its open posture it grants every class from memory, closed ones too.
// The release gate builds lockd this way to show that its quorum-loss
// check catches a closed class granted without quorum; never ship it.
const brokenOpenAll = true
