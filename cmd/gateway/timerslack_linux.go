//go:build linux && cgo

package main

// The process's timer slack is raised to 1 ms before the Go runtime starts, so that every
// thread it makes inherits it. While cgo calls (decodes, model runs) hold their Ps, the
// runtime's sysmon thread polls every few tens of microseconds, and with the kernel's default
// slack (50 µs) each poll is a wake-up and a context switch of its own; with 1 ms the kernel
// coalesces them (the figures: docs/internals.md, "Timer slack"). Go's timers may then fire up
// to 1 ms late; the gateway's shortest (batch windows) are milliseconds. A slack already larger
// (set by the service manager) is kept.

/*
#include <sys/prctl.h>

#define IMAGEGATE_TIMER_SLACK_NS 1000000

__attribute__((constructor)) static void imagegate_timer_slack(void) {
	if (prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) < IMAGEGATE_TIMER_SLACK_NS) {
		prctl(PR_SET_TIMERSLACK, (unsigned long)IMAGEGATE_TIMER_SLACK_NS, 0, 0, 0);
	}
}
*/
import "C"
