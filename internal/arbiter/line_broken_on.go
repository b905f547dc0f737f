//go:build gate_broken_line

package arbiter

// brokenLineOrder: this build is BROKEN ON PURPOSE (tag gate_broken_line).
// A release hands a durable key to the LAST waiter in its line, without
// comparing that nobody is ahead of it. The release gate builds lockd this
// way to show that its durable-line check catches the jump; never ship it.
const brokenLineOrder = true
