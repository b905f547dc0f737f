//go:build !gate_broken_recovery

package arbiter

// brokenRecovery is false: grants of classes open on quorum loss wait out
// open graces. See recovery_broken_on.go.
const brokenRecovery = false
