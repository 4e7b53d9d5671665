// The data plane's port range, for firewalled networks.
//
// Debian's Gloo (git 2022-05-18) gives every pair of ranks a listening
// socket of its own, bound to the device address with port 0, and offers no
// way to choose the port. So this file defines `bind` for the process: while
// a range is set, a TCP bind to port 0 takes the first free port of the
// range instead (a bind that names a port, or a range of none, goes straight
// to the kernel). Every binary with the Gloo communicator carries this
// definition; until SetListenPortRange is called (yoke-trainer does, with
// --data-ports) it is libc's bind.
//
// A port is free when nothing else is bound to it. The search binds without
// SO_REUSEADDR, so two processes that share a range never end up on one
// port, and restores the caller's option after.
//
// Thread-safety: SetListenPortRange and the bind search may run on any
// thread; the range is read once per bind.
#ifndef YOKE_COLLECTIVE_LISTEN_PORTS_H_
#define YOKE_COLLECTIVE_LISTEN_PORTS_H_

#include <cstdint>

#include "common/port_range.h"

namespace yoke::collective {

using common::PortRange;

// Sets the process's range; an empty one turns it off.
void SetListenPortRange(PortRange range);
PortRange ListenPortRange();

// How many binds found every port of the range taken, since the start.
int64_t ListenPortRangeExhaustions();

}  // namespace yoke::collective

#endif  // YOKE_COLLECTIVE_LISTEN_PORTS_H_
