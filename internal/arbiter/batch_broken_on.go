//go:build gate_broken_batch

package arbiter

// batchDropsCompares: this build is BROKEN ON PURPOSE (tag
// gate_broken_batch). Every part of a group commit but the first loses its
// own compares, so a key whose compare would have failed is granted (or
// released) anyway beside the others. The release gate builds lockd this
// way to show that it catches it; never ship it.
const batchDropsCompares = true
