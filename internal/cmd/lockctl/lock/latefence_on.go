//go:build gate_late_fence

package lock

// lateFence: this build is BROKEN ON PURPOSE (tag gate_late_fence). A lost
// lock's command gets SIGTERM and SIGKILL only --grace later, so it can
// outlive the lease while another holder is granted. The release gate
// builds its worker this way to show that it catches that; never ship it.
const lateFence = true
